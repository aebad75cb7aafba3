import Testing
import Backup
import Foundation
import Crypto
import Storage
@testable import Drive

/// Group commit (GroupCommit.swift), without a kernel: a change is seen at once through
/// the drive, reaches the database for other connections when its group commits, undoes
/// only itself when it fails, and a block file goes only after the commit that dropped
/// its row. A window of a minute stands for "not yet": nothing here waits for it.
@Suite(.tags(.logic)) struct GroupCommitTests {
    let logic = FileSystemLogicTests()

    /// The names in the root folder as another connection reads them (committed only),
    /// but the Camera Roll every workspace of these tests starts with.
    func committedNames(_ fs: DriveFileSystem) throws -> Set<String> {
        let db = try Database(path: fs.catalogPath, options: .init(readOnly: true, create: false))
        return Set(try db.query("SELECT name FROM entries WHERE parent = 1") { String(decoding: $0.bytes(0) ?? [], as: UTF8.self) })
            .subtracting([CameraRollRules.folderName])
    }

    func makeFS(_ dir: TemporaryDirectory, window: TimeInterval) throws -> DriveFileSystem {
        let fs = try logic.makeFS(dir)
        fs.startBackgroundWork(groupCommitWindow: window)
        return fs
    }

    @Test func aChangeIsSeenThroughTheDriveAtOnceAndByOthersWhenItsGroupCommits() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: 60)
        defer { fs.shutdown() }
        let a = try logic.store(fs, "a.txt", Array("first".utf8))
        _ = try fs.create(parent: 1, name: Array("folder".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        #expect(try fs.lookup(parent: 1, name: Array("a.txt".utf8)).ino == a.ino)
        let fh = try fs.open(a.ino, writable: false, truncate: false)
        #expect(try logic.read(fs, fh, count: 100, at: 0) == Array("first".utf8))
        fs.release(fh)
        #expect(try committedNames(fs).isEmpty, "another connection sees the group before it commits")

        try fs.syncAll()   // fsync(2) and the flusher commit the group first
        #expect(try committedNames(fs) == ["a.txt", "folder"])
    }

    @Test func theCommitterCommitsTheLastChangeOfABurst() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: 0.02)
        defer { fs.shutdown() }
        for i in 0..<5 { _ = try logic.store(fs, "f\(i)", [UInt8(i)]) }
        var names: Set<String> = []
        for _ in 0..<500 where names.count < 5 {
            usleep(10_000)
            names = try committedNames(fs)
        }
        #expect(names == Set((0..<5).map { "f\($0)" }), "no later change came, yet the group must commit")
    }

    @Test func aFailedChangeInAGroupUndoesOnlyItself() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: 60)
        defer { fs.shutdown() }
        _ = try fs.create(parent: 1, name: Array("a".utf8), mode: UInt32(S_IFREG) | 0o644, uid: 0, gid: 0)
        #expect(throws: Errno.fileExists) {
            _ = try fs.create(parent: 1, name: Array("a".utf8), mode: UInt32(S_IFREG) | 0o644, uid: 0, gid: 0)
        }
        _ = try fs.create(parent: 1, name: Array("b".utf8), mode: UInt32(S_IFREG) | 0o644, uid: 0, gid: 0)
        try fs.syncAll()
        #expect(try committedNames(fs) == ["a", "b"])
    }

    /// A kill before the group commits brings the row back: its file must still be there.
    @Test func aBlockFileGoesOnlyAfterTheCommitThatDroppedItsRow() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: 60)
        defer { fs.shutdown() }
        let bytes = pseudoRandomBytes(200_000, seed: 77)   // past the inline limit: a block file
        let big = try logic.store(fs, "big.bin", bytes)
        try fs.syncAll()
        let digest = SHA256Hasher.digest(bytes)
        #expect(fs.blobStore.contains(digest))

        try fs.unlink(parent: 1, name: Array("big.bin".utf8))
        fs.forget(big.ino, count: 1)   // the kernel's reference from the create
        #expect(try committedNames(fs) == ["big.bin"])
        #expect(fs.blobStore.contains(digest), "removed before the commit that dropped its row")

        try fs.syncAll()
        #expect(try committedNames(fs).isEmpty)
        var gone = false
        for _ in 0..<500 where !gone {   // unlinked by a background thread after the commit
            gone = !fs.blobStore.contains(digest)
            if !gone { usleep(10_000) }
        }
        #expect(gone)
    }

    /// A photo is durable at its close, and the backup reads its queue on a connection of
    /// its own: a change its follower asks to commit at once commits the group at once,
    /// whatever the window.
    @Test func aPhotosCloseCommitsAtOnce() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: 60)
        defer { fs.shutdown() }
        fs.addFollower(PhotoRecorder())
        _ = try logic.store(fs, "elsewhere.txt", Array("x".utf8))
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let photo = try logic.store(fs, "IMG_0001.jpg", in: roll.ino, Array("jpeg".utf8))
        let db = try Database(path: fs.catalogPath, options: .init(readOnly: true, create: false))
        let content = try db.queryOne("SELECT content FROM inodes WHERE ino = ?", photo.ino) { $0.string(0) }
        #expect(content == ContentHash.of(bytes: Array("jpeg".utf8)).hex)
        #expect(try committedNames(fs).contains("elsewhere.txt"), "the changes before it share its commit")
    }

    /// A follower reads what the journal marked from a connection of its own: it must
    /// be told once the marks are committed, not when they are recorded (inside a group
    /// that may stay open for its whole window), or it looks too early and sees nothing.
    @Test(arguments: [60.0, 0.0])
    func theJournalIsToldOfCommittedChangesOnlyOnceOtherConnectionsSeeThem(window: TimeInterval) throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir, window: window)
        defer { fs.shutdown() }
        let journal = CommitWatchingJournal(catalogPath: fs.catalogPath)
        fs.addFollower(journal)
        _ = try logic.store(fs, "a.txt", Array("first".utf8))
        _ = try fs.create(parent: 1, name: Array("folder".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        if window > 0 {
            #expect(journal.told.isEmpty, "told before the group committed")
            try fs.syncAll()
        }
        let told = journal.told
        #expect(!told.isEmpty, "never told that its changes were committed")
        for unseen in told { #expect(unseen.isEmpty, "told while another connection could not see inodes \(unseen)") }
        #expect(journal.recorded.count >= 2)
    }
}

/// A change journal that checks, each time it is told of a commit, which of the inodes
/// it recorded another connection cannot see yet. `@unchecked Sendable`: called under
/// the catalog's lock only, read by the test after the changes returned.
final class CommitWatchingJournal: ChangeJournal, @unchecked Sendable {
    let catalogPath: String
    private(set) var recorded: [UInt64] = []
    /// One entry per `committed()`: the recorded inodes another connection did not see then.
    private(set) var told: [[UInt64]] = []

    init(catalogPath: String) { self.catalogPath = catalogPath }

    func record(_ change: DriveChange, in database: Database) throws { recorded.append(change.ino) }

    func committed() {
        guard let db = try? Database(path: catalogPath, options: .init(readOnly: true, create: false)) else {
            told.append(recorded)
            return
        }
        told.append(recorded.filter { ino in
            ((try? db.queryOne("SELECT 1 FROM inodes WHERE ino = ?", Int64(ino)) { _ in true }) ?? nil) == nil
        })
    }
}
