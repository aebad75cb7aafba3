import Testing
import Foundation
import Crypto
import Storage
import TestSupport
import TestTraits

/// Tier three: the synced workspace's trash, versions, pins and optimize storage, through
/// the `vdrive` command line beside two real mounts on one real server (embedded, and
/// PostgreSQL + SeaweedFS). What one command changes on the server reaches both devices
/// through their mirrors, read back byte for byte.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct WorkspaceCommandsEndToEndTests {
    typealias Mirror = WorkspaceMirrorEndToEndTests

    /// `vdrive ARGS` as `drive`'s user, with its server, token and state.
    static func vdrive(_ drive: MountedDrive, _ arguments: [String]) throws -> CommandResult {
        try drive.vdrive(arguments + ["--state", drive.state] + drive.mountArguments)
    }

    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    static func json(_ text: String) throws -> [[String: Any]] {
        try #require(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]], "not a JSON array: \(text)")
    }

    @Test(arguments: Backend.allCases)
    func theTrashListsWhatWasDeletedAndARestoreReachesEveryDevice(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-trash-cli"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        try Mirror.mkdir(a.path("Docs"))
        try Mirror.mkdir(a.path("Old"))
        let note = pseudoRandomBytes(150_000, seed: 401)
        try writeFile(a.path("Docs/note.txt"), note)
        try writeFile(a.path("Old/a.txt"), Array("a".utf8))
        try writeFile(a.path("Old/b.txt"), Array("b".utf8))
        try writeFile(a.path("keep.txt"), Array("stays".utf8))
        try Mirror.waitForSameTree(drives)

        // Deleted on one device: gone on the other, listed in the trash.
        try FileManager.default.removeItem(atPath: a.path("Docs/note.txt"))
        try FileManager.default.removeItem(atPath: a.path("Old"))
        try Mirror.waitFor("the deletes on the other device", drives) { !Self.exists(b.path("Docs/note.txt")) && !Self.exists(b.path("Old")) }
        let listed = try Self.vdrive(b, ["trash", "list", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let entries = try Self.json(listed.stdout)
        let paths = Set(entries.compactMap { $0["path"] as? String })
        try Mirror.waitFor("the deletes in the trash", drives) {
            let now = Set(try Self.json(try Self.vdrive(b, ["trash", "list", "--json"]).stdout).compactMap { $0["path"] as? String })
            return now.isSuperset(of: ["Docs/note.txt", "Old", "Old/a.txt", "Old/b.txt"])
        }
        let noteEntry = try #require(try Self.json(try Self.vdrive(b, ["trash", "list", "--json"]).stdout).first { $0["path"] as? String == "Docs/note.txt" },
                                     "\(paths)")
        #expect(noteEntry["kind"] as? String == "file")
        #expect((noteEntry["size"] as? NSNumber)?.int64Value == 150_000)
        #expect(noteEntry["deletedBy"] as? String == "laptop")
        let text = try Self.vdrive(b, ["trash", "list"])
        #expect(text.status == 0 && text.stdout.contains("Docs/note.txt") && text.stdout.contains("laptop"), "\(text.stdout)")

        // Nothing there: 66, saying what to do.
        let missing = try Self.vdrive(b, ["trash", "restore", "Docs/never.txt"])
        #expect(missing.status == 66 && missing.stderr.contains("vdrive trash list"), "\(missing.stderr)")

        // A file by its workspace path, from the other device; a folder by its path on
        // the mount, with what was deleted in it.
        let one = try Self.vdrive(b, ["trash", "restore", "Docs/note.txt"])
        #expect(one.status == 0, "\(one.stderr)")
        // (by its path on the mount alone: the server is the one that drive syncs with)
        let folder = try a.vdrive(["trash", "restore", a.path("Old")])
        #expect(folder.status == 0, "\(folder.stderr)")
        try Mirror.waitFor("the restored nodes on both devices", drives) {
            [a, b].allSatisfy { Self.exists($0.path("Docs/note.txt")) && Self.exists($0.path("Old/a.txt")) && Self.exists($0.path("Old/b.txt")) }
        }
        #expect(try readFile(b.path("Docs/note.txt")) == note)
        #expect(try readFile(a.path("Docs/note.txt")) == note)
        #expect(try readFile(b.path("Old/b.txt")) == Array("b".utf8))
        try Mirror.waitForSameTree(drives)

        // A batch: everything deleted under a folder since a time.
        let before = Int64(Date().timeIntervalSince1970) - 1
        try writeFile(b.path("Docs/one.txt"), Array("1".utf8))
        try writeFile(b.path("Docs/two.txt"), Array("2".utf8))
        try Mirror.waitFor("the new files on the other device", drives) { Self.exists(a.path("Docs/two.txt")) }
        try FileManager.default.removeItem(atPath: b.path("Docs/one.txt"))
        try FileManager.default.removeItem(atPath: b.path("Docs/two.txt"))
        try FileManager.default.removeItem(atPath: b.path("keep.txt"))
        try Mirror.waitFor("the deletes on the first device", drives) { !Self.exists(a.path("Docs/two.txt")) && !Self.exists(a.path("keep.txt")) }
        try Mirror.waitFor("the deletes on the server", drives) {
            Set(try Self.json(try Self.vdrive(a, ["trash", "list", "--json"]).stdout).compactMap { $0["path"] as? String })
                .isSuperset(of: ["Docs/one.txt", "Docs/two.txt"])
        }
        let batch = try Self.vdrive(a, ["trash", "restore", "--under", "Docs", "--since", "@\(before)"])
        #expect(batch.status == 0, "\(batch.stderr)")
        try Mirror.waitFor("the batch on both devices", drives) {
            [a, b].allSatisfy { Self.exists($0.path("Docs/one.txt")) && Self.exists($0.path("Docs/two.txt")) }
        }
        #expect(!Self.exists(a.path("keep.txt")), "deleted outside the folder: still in the trash")
        try Mirror.waitForSameTree(drives)
    }

    @Test(arguments: Backend.allCases)
    func anOldVersionBecomesCurrentOnEveryDeviceAndAStaleBaseIsAConflict(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-versions-cli"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let contents = (1...3).map { pseudoRandomBytes(90_000 + $0, seed: UInt64(410 + $0)) }
        for c in contents {
            try writeFile(a.path("plan.txt"), c)
            try Mirror.waitFor("this version on the other device", drives) {
                (try? sha256(ofFile: b.path("plan.txt"))) == SHA256Hasher.digest(c).hex
            }
        }
        func versions(_ drive: MountedDrive, _ path: String) throws -> [[String: Any]] {
            let r = try Self.vdrive(drive, ["versions", path, "--json"])
            guard r.status == 0 else { throw TestFailure("versions: \(r.status) \(r.stderr)") }
            return try Self.json(r.stdout)
        }
        // By its path on the mount, and by its workspace path: the same list.
        let listed = try versions(b, b.path("plan.txt"))
        #expect(listed.count == 3, "\(listed)")
        #expect(listed.map { ($0["size"] as? NSNumber)?.intValue } == [90_001, 90_002, 90_003])
        #expect(listed.allSatisfy { $0["device"] as? String == "laptop" })
        #expect(listed.last?["current"] as? Bool == true)
        #expect(try versions(a, "plan.txt").count == 3)
        let table = try Self.vdrive(b, ["versions", "plan.txt"])
        #expect(table.status == 0 && table.stdout.contains("(current)"), "\(table.stdout)")
        // A path on the mount is enough: the drive's state folder is the mount's source and
        // its server the one the mount noted there (the drive has no default state or
        // remote.json in this user's folders, and is mounted with --state and --server).
        let untold = try b.vdrive(["versions", b.path("plan.txt"), "--json"])
        #expect(untold.status == 0 && (try? Self.json(untold.stdout).count) == 3, "\(untold.status) \(untold.stderr)")
        let noDrive = try b.vdrive(["versions", "plan.txt"])
        #expect(noDrive.status == 66 && noDrive.stderr.contains("--state DIR"), "a workspace path names no drive: \(noDrive.status) \(noDrive.stderr)")

        // Version 1 made current from the second device: both read it, history kept.
        let restored = try Self.vdrive(b, ["versions", "plan.txt", "--restore", "1"])
        #expect(restored.status == 0, "\(restored.stderr)")
        try Mirror.waitFor("version 1 on both devices", drives) {
            [a, b].allSatisfy { (try? sha256(ofFile: $0.path("plan.txt"))) == SHA256Hasher.digest(contents[0]).hex }
        }
        #expect(try readFile(a.path("plan.txt")) == contents[0])
        let after = try versions(a, "plan.txt")
        #expect(after.count == 4 && after.last?["device"] as? String == "desktop", "\(after)")
        #expect(after.last?["hash"] as? String == listed.first?["hash"] as? String)

        let noSuch = try Self.vdrive(b, ["versions", "plan.txt", "--restore", "9"])
        #expect(noSuch.status == 64, "\(noSuch.stderr)")
        let notThere = try Self.vdrive(b, ["versions", "nothing.txt"])
        #expect(notThere.status == 66, "\(notThere.stderr)")

        // The desktop is away while the laptop changes the file: a restore from the
        // desktop's catalog (its last synced version) is refused as a conflict.
        try b.unmount()
        try writeFile(a.path("plan.txt"), Array("changed while the desktop was away".utf8))
        try Mirror.waitFor("the change on the server", drives) { (try? versions(a, "plan.txt").count) == 5 }
        let stale = try Self.vdrive(b, ["versions", "plan.txt", "--restore", "2"])
        #expect(stale.status == 75 && stale.stderr.contains("changed since this drive last synced it"), "\(stale.status) \(stale.stderr)")
        #expect(try versions(a, "plan.txt").count == 5, "nothing was done")
        try b.start()
        try Mirror.waitForSameTree(drives)
        #expect(try readFile(b.path("plan.txt")) == Array("changed while the desktop was away".utf8))
    }

    /// Editors save through other names: a temporary renamed over the file, or the old
    /// file renamed to a backup name and the new one written. Either way the save is a new
    /// version of the file, listed by `vdrive versions` on the other device, and nothing
    /// goes to the trash; what was really deleted does, and `trash list FOLDER` (a folder
    /// on the mount, nothing else given) shows what was deleted in it.
    @Test(arguments: Backend.allCases)
    func anEditorsSaveIsANewVersionNotADelete(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-editor-save"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        try Mirror.mkdir(a.path("Docs"))
        let file = a.path("Docs/notes.txt"), temp = a.path("Docs/.goutputstream-4TQ2Z1"), backup = file + "~"
        let saved = (1...4).map { Array("version \($0) of the notes\n".utf8) }
        func onTheOtherDevice(_ k: Int) throws {
            try Mirror.waitFor("version \(k + 1) on the other device", drives) { (try? readFile(b.path("Docs/notes.txt"))) == saved[k] }
        }
        try writeFile(file, saved[0])
        try onTheOtherDevice(0)
        // A temporary renamed over the file (GNOME's editors, most save dialogs).
        try writeFile(temp, saved[1])
        try #require(rename(temp, file) == 0)
        try onTheOtherDevice(1)
        // The old file renamed to a backup name, the new one written, the backup removed (vim).
        try #require(rename(file, backup) == 0)
        try writeFile(file, saved[2])
        try #require(unlink(backup) == 0)
        try onTheOtherDevice(2)
        // Both in one save.
        try writeFile(temp, Array("an unfinished save".utf8))
        try #require(rename(temp, file) == 0)
        try #require(rename(file, backup) == 0)
        try writeFile(file, saved[3])
        try #require(unlink(backup) == 0)
        try onTheOtherDevice(3)

        let listed = try Self.vdrive(b, ["versions", "Docs/notes.txt", "--json"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let hashes = try Self.json(listed.stdout).compactMap { $0["hash"] as? String }
        let wanted = saved.map { ContentHash.of(bytes: $0).hex }
        #expect(hashes.filter(wanted.contains) == wanted, "every save a version of the one file, in order: \(hashes)")

        // A folder made under a temporary name and renamed over an empty one takes it over.
        try Mirror.mkdir(a.path("Drafts"))
        try Mirror.waitFor("the empty folder on the other device", drives) { Self.exists(b.path("Drafts")) }
        try Mirror.mkdir(a.path("Drafts.part"))
        try writeFile(a.path("Drafts.part/plan.txt"), Array("the plan".utf8))
        try #require(rename(a.path("Drafts.part"), a.path("Drafts")) == 0)
        try Mirror.waitFor("the new folder's file on the other device", drives) { (try? readFile(b.path("Drafts/plan.txt"))) == Array("the plan".utf8) }

        // Really deleted: in the trash, and listed under its folder only.
        try writeFile(a.path("Docs/gone.txt"), Array("gone".utf8))
        try writeFile(a.path("elsewhere.txt"), Array("also gone".utf8))
        try Mirror.waitFor("both files on the other device", drives) { Self.exists(b.path("Docs/gone.txt")) && Self.exists(b.path("elsewhere.txt")) }
        try FileManager.default.removeItem(atPath: a.path("Docs/gone.txt"))
        try FileManager.default.removeItem(atPath: a.path("elsewhere.txt"))
        try Mirror.waitFor("the deletes in the trash", drives) {
            Set(try Self.json(try Self.vdrive(b, ["trash", "list", "--json"]).stdout).compactMap { $0["path"] as? String })
                .isSuperset(of: ["Docs/gone.txt", "elsewhere.txt"])
        }
        let trashed = try Self.json(try Self.vdrive(b, ["trash", "list", "--json"]).stdout).compactMap { $0["path"] as? String }
        #expect(!trashed.contains { $0.hasPrefix("Docs/notes") || $0.hasPrefix("Drafts") }, "a save is no delete: \(trashed)")
        let docs = try b.vdrive(["trash", "list", b.path("Docs"), "--json"])
        #expect(docs.status == 0, "\(docs.stderr)")
        #expect(try Self.json(docs.stdout).compactMap { $0["path"] as? String } == ["Docs/gone.txt"], "\(docs.stdout)")
        let table = try b.vdrive(["trash", "list", b.path("Docs")])
        #expect(table.status == 0 && table.stdout.contains("Docs/gone.txt") && !table.stdout.contains("elsewhere"), "\(table.stdout)")
        // Run in a folder of the drive, nothing given: that drive's server and status.
        let here = try runCommand(vdriveBinary, ["trash", "list"], environment: b.environment, directory: b.path("Docs"))
        #expect(here.status == 0 && here.stdout.contains("Docs/gone.txt") && here.stdout.contains("elsewhere.txt"), "\(here.status) \(here.stderr)")
        try Mirror.waitFor("vdrive status in the drive's folder saying it is up to date", drives) {
            let status = try runCommand(vdriveBinary, ["status"], environment: b.environment, directory: b.path("Docs"))
            return status.status == 0 && status.stdout.contains("Workspace: up to date")
        }
    }

    /// Optimize storage makes synced files online-only on a device once the server holds
    /// them; reading brings them back whole. A pinned folder's files (made on the other
    /// device, later) are fetched without a read and stay. A small file is fetched ahead.
    @Test(arguments: Backend.allCases)
    func syncedFilesBecomeOnlineOnlyUnlessPinnedAndReadBackWhole(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-pins-cli"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"], environment: OnlineContentTests.environment)
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        func held(_ drive: MountedDrive, _ bytes: [UInt8]) -> Bool { Self.exists(OnlineContentTests.blockFile(drive, bytes)) }

        // A small file made on the laptop is on the desktop's disk before anyone reads it.
        let small = pseudoRandomBytes(200_000, seed: 421)
        try writeFile(a.path("small.txt"), small)
        try Mirror.waitFor("the small file fetched ahead on the other device", drives) { held(b, small) }

        // A pinned folder on the desktop: a file the laptop makes in it is fetched whole.
        try Mirror.mkdir(a.path("Offline"))
        try Mirror.waitFor("the folder on the other device", drives) { Self.exists(b.path("Offline")) }
        let pin = try b.vdrive(["pin", b.path("Offline")])
        #expect(pin.status == 0, "\(pin.stderr)")
        #expect(BackupEndToEndTests.xattr(b.path("Offline"), "user.vdrive.pin") == "1")
        let big = pseudoRandomBytes(2 * Blocks.size + 5_000, seed: 423)
        let firstBlock = Array(big[0..<Blocks.size])
        try writeFile(a.path("Offline/video.mov"), big)
        let unpinned = pseudoRandomBytes(Blocks.size + 7_000, seed: 425)
        try writeFile(a.path("large.bin"), unpinned)
        try Mirror.waitFor("the pinned file's blocks on the other device", drives) { held(b, firstBlock) && held(b, Array(big[(2 * Blocks.size)...])) }
        try Mirror.waitFor("the large file on the other device", drives) { Self.exists(b.path("large.bin")) }
        #expect(!held(b, Array(unpinned[0..<Blocks.size])), "a large unpinned file waits for a read")

        // Read once on the desktop (fetched, held), then optimize storage with a tiny
        // bound: the unpinned synced files go, the pinned one stays.
        #expect(try readFile(b.path("large.bin")) == unpinned)
        #expect(held(b, Array(unpinned[0..<Blocks.size])))
        try OnlineContentTests.settings(b, "cache-size", "1K")
        try OnlineContentTests.settings(b, "optimize-storage", "on")
        try Mirror.waitFor("unpinned synced files online-only", drives) {
            !held(b, Array(unpinned[0..<Blocks.size])) && !held(b, small)
        }
        let passes = OnlineContentTests.boundPasses(b)
        try Mirror.waitFor("two more passes of the bound", drives) { OnlineContentTests.boundPasses(b) >= passes + 2 }
        #expect(held(b, firstBlock), "pinned through its folder: kept")
        // Read back whole, from the server.
        #expect(try readFile(b.path("large.bin")) == unpinned)
        #expect(try readFile(b.path("small.txt")) == small)
        #expect(try readFile(b.path("Offline/video.mov")) == big)

        // Unpinned: it may go too.
        let unpin = try b.vdrive(["unpin", b.path("Offline")])
        #expect(unpin.status == 0, "\(unpin.stderr)")
        try Mirror.waitFor("the unpinned file online-only", drives) { !held(b, firstBlock) }
        #expect(try readFile(b.path("Offline/video.mov")) == big)
        #expect(held(a, firstBlock), "the laptop's bound is off: it keeps what it wrote")
        let notOnMount = try b.vdrive(["pin", dir.path])
        #expect(notOnMount.status == 66, "\(notOnMount.stderr)")
        try Mirror.waitForSameTree(drives)
    }
}
