import Testing
import TestTraits
@testable import WorkspaceMirror

/// The conflict rules alone, without a drive or a server (Docs/sync.md, "Conflicts").
@Suite(.tags(.logic)) struct MirrorPlannerTests {
    static let folder = "11111111111111111111111111111111"
    static let other = "22222222222222222222222222222222"

    static func file(_ name: String = "note.txt", parent: String = RemoteNode.rootID, hash: String = "aa", size: Int64 = 5,
                     mtime: Int64 = 10, executable: Bool = false, version: Int64 = 3, deleted: Bool = false) -> RemoteNode {
        RemoteNode(id: "33333333333333333333333333333333", parent: parent, name: name, kind: .file, hash: hash, size: size, mtime: mtime,
                   executable: executable, version: version, deleted: deleted)
    }

    @Test func anEditAgainstADeleteWins() {
        let base = Self.file()
        let ours = Self.file(hash: "bb", mtime: 20)
        let theirs = Self.file(version: 4, deleted: true)
        #expect(MirrorPlanner.resolvePut(ours: ours, base: base, theirs: theirs) == .merge(local: ours, send: ours))
    }

    @Test func twoEditsOfTheContentMakeAConflictCopy() {
        let base = Self.file()
        #expect(MirrorPlanner.resolvePut(ours: Self.file(hash: "bb"), base: base, theirs: Self.file(hash: "cc", version: 4)) == .conflictCopy)
    }

    @Test func theSameEditOnBothSidesIsNoConflict() {
        let base = Self.file()
        let result = MirrorPlanner.resolvePut(ours: Self.file(hash: "bb", mtime: 20), base: base, theirs: Self.file(hash: "bb", mtime: 30, version: 4))
        guard case .merge(let local, _) = result else { Issue.record("expected a merge, got \(result)"); return }
        #expect(local.hash == "bb")
    }

    @Test func aRenameAndAnEditBothApply() {
        let base = Self.file()
        let ours = Self.file("renamed.txt")
        let theirs = Self.file(hash: "cc", size: 9, mtime: 40, version: 4)
        guard case .merge(let local, let send) = MirrorPlanner.resolvePut(ours: ours, base: base, theirs: theirs) else {
            Issue.record("expected a merge"); return
        }
        #expect(local.name == "renamed.txt" && local.hash == "cc" && local.size == 9 && local.mtime == 40)
        #expect(send == local)
    }

    @Test func ourEditAndTheirRenameBothApply() {
        let base = Self.file()
        let ours = Self.file(hash: "bb", size: 7, mtime: 50)
        let theirs = Self.file("moved.txt", parent: Self.folder, version: 4)
        guard case .merge(let local, _) = MirrorPlanner.resolvePut(ours: ours, base: base, theirs: theirs) else {
            Issue.record("expected a merge"); return
        }
        #expect(local.name == "moved.txt" && local.parent == Self.folder && local.hash == "bb" && local.size == 7)
    }

    @Test func moveAgainstMoveTheServerWins() {
        let base = Self.file()
        let ours = Self.file("a.txt", parent: Self.folder)
        let theirs = Self.file("b.txt", parent: Self.other, version: 4)
        guard case .merge(let local, _) = MirrorPlanner.resolvePut(ours: ours, base: base, theirs: theirs) else {
            Issue.record("expected a merge"); return
        }
        #expect(local.name == "b.txt" && local.parent == Self.other)
    }

    @Test func theExecutableBitMergesOnItsOwn() {
        let base = Self.file()
        guard case .merge(let local, _) = MirrorPlanner.resolvePut(ours: Self.file(executable: true), base: base,
                                                                  theirs: Self.file("x.txt", version: 4)) else {
            Issue.record("expected a merge"); return
        }
        #expect(local.executable && local.name == "x.txt")
    }

    @Test func aDeleteAgainstAnEditLosesAndTheFileComesBack() {
        #expect(MirrorPlanner.resolveDelete(base: Self.file(), theirs: Self.file(hash: "cc", version: 4)) == .restore)
    }

    @Test func aDeleteAgainstARenameDeletesAgain() {
        #expect(MirrorPlanner.resolveDelete(base: Self.file(), theirs: Self.file("b.txt", version: 4)) == .deleteAgain)
    }

    @Test func aDeleteAgainstADeleteIsDone() {
        #expect(MirrorPlanner.resolveDelete(base: Self.file(), theirs: Self.file(version: 4, deleted: true)) == .done)
    }

    @Test func sameNamedFoldersBecomeOneAndFilesAreBothKept() {
        #expect(MirrorPlanner.clash(oursKind: .folder, theirsKind: .folder) == .mergeFolders)
        #expect(MirrorPlanner.clash(oursKind: .file, theirsKind: .file) == .renameOurs)
        #expect(MirrorPlanner.clash(oursKind: .folder, theirsKind: .file) == .renameOurs)
    }

    @Test func aChangeIsSentWhenQuietOrAfterItsLongestWait() {
        let s: Int64 = 1_000_000_000
        #expect(!MirrorPlanner.isDue(changed: 10 * s, since: 10 * s, now: 10 * s + s / 10, quiet: s / 5, most: s))
        #expect(MirrorPlanner.isDue(changed: 10 * s, since: 10 * s, now: 10 * s + s / 4, quiet: s / 5, most: s))
        // Rewritten every 100 ms: never quiet, still sent after a second.
        #expect(MirrorPlanner.isDue(changed: 11 * s - s / 20, since: 10 * s, now: 11 * s, quiet: s / 5, most: s))
    }

    @Test func conflictNamesKeepTheExtensionAndNumberWhenTaken() {
        let at: Int64 = 1_764_662_400   // 2025-12-02 08:00 UTC
        #expect(MirrorRules.conflictName("report.pdf", device: "laptop", at: at) { _ in false } == "report (conflict from laptop 2025-12-02 0800).pdf")
        #expect(MirrorRules.conflictName(".bashrc", device: "pc", at: at) { _ in false } == ".bashrc (conflict from pc 2025-12-02 0800)")
        let taken: Set = ["a (conflict from pc 2025-12-02 0800).txt"]
        #expect(MirrorRules.conflictName("a.txt", device: "pc", at: at) { taken.contains($0) } == "a (conflict from pc 2025-12-02 0800 2).txt")
        let long = String(repeating: "x", count: 250) + ".txt"
        #expect(MirrorRules.conflictName(long, device: "pc", at: at) { _ in false }.utf8.count <= 255)
    }

    @Test func temporaryNamesAreNotSent() {
        for name in [".~lock.report.odt#", "notes.txt.swp", "draft~", ".goutputstream-ABC123", "movie.part", ".#notes.txt", ".vdrive-moving-abc"] {
            #expect(MirrorRules.isTemporary(name), "\(name)")
        }
        for name in ["report.odt", "notes.txt", ".bashrc", "part", "photo.jpg"] {
            #expect(!MirrorRules.isTemporary(name), "\(name)")
        }
    }
}
