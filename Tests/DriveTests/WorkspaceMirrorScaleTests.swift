import Testing
import Foundation
import Crypto
import Storage
import TestSupport
import TestTraits

/// Tier three: the synced workspace at real scale and under real faults, judged from the
/// server's side. Real mounts of `vdrive mount`, a real `vdrive serve` (embedded, and two
/// processes on PostgreSQL + SeaweedFS); what a device sends is read from the server's
/// access log and records (`LocalServer.accessLog(since:)`, `treeChanges(since:)`), and
/// what arrives is read back byte for byte on the other device.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct WorkspaceMirrorScaleTests {
    typealias Mirror = WorkspaceMirrorEndToEndTests

    static func exists(_ path: String) -> Bool { FileManager.default.fileExists(atPath: path) }

    static func size(_ path: String) -> Int64? {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_size) : nil
    }

    static func status(_ drive: MountedDrive) -> String {
        (try? String(contentsOfFile: drive.path(".backup/status"), encoding: .utf8)) ?? ""
    }

    /// Waits until `drive` has sent everything and applied everything it knows of.
    static func waitUntilUpToDate(_ drive: MountedDrive, _ drives: [MountedDrive], within seconds: Double = 120) throws {
        try Mirror.waitFor("\(drive.mountPoint) up to date", drives, within: seconds) { status(drive).contains("Workspace: up to date") }
    }

    /// Writes `blocks` blocks of pseudo-random bytes, each distinct (one random block with
    /// its index in its first bytes: no block is another's, so nothing deduplicates within
    /// the file), and returns the SHA-256 of the whole file.
    static func writeDistinctBlocks(_ path: String, blocks: Int, seed: UInt64) throws -> String {
        var block = randomBytes(Blocks.size, seed: seed)
        let hasher = SHA256Hasher()
        let fd = try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        defer { close(fd) }
        for i in 0..<blocks {
            withUnsafeBytes(of: UInt64(i).littleEndian) { stamp in block.withUnsafeMutableBytes { $0.copyMemory(from: stamp) } }
            try block.withUnsafeBytes { bytes in
                try FileIO.pwrite(fd, bytes, at: Int64(i) * Int64(Blocks.size))
                hasher.update(bytes)
            }
        }
        return hasher.finish().hex
    }

    /// What the server received while one change went from `origin` to the other device:
    /// `change` is made on `origin`, then `arrived` (on the other device) and `origin` up to
    /// date are waited for, and the access log is read until its tree change is there (a
    /// line is written once its reply is sent: a device may have its answer a moment before).
    struct Received {
        let lines: [AccessLine]
        /// Nodes the server's tree changed meanwhile.
        let nodes: Int
        var blockUploads: Int { lines.filter(\.isBlockUpload).count }
        var uploadPlans: [AccessLine] { lines.filter(\.isUploadPlan) }
        var treeRequests: Int { lines.filter(\.isTreeChanges).count }
    }

    static func received(_ what: String, _ server: LocalServer, from origin: MountedDrive, _ drives: [MountedDrive],
                         change: () throws -> Void, arrived: () throws -> Bool) throws -> Received {
        let mark = server.logMark()
        let version = server.treeVersion()
        try change()
        try Mirror.waitFor("\(what) on the other device", drives, within: 60, arrived)
        try waitUntilUpToDate(origin, drives)
        var lines: [AccessLine] = []
        try Mirror.waitFor("\(what) in the server's access log", drives, within: 30) {
            lines = server.accessLog(since: mark)
            return lines.contains(where: \.isTreeChanges)
        }
        return Received(lines: lines, nodes: server.treeChanges(since: version))
    }

    // MARK: - 1. Renames, moves and copies at scale send no content

    /// A 1 GiB file renamed into a folder: no block, no upload plan, one tree change; the
    /// other device reads it whole under its new name. Copied there with `cp`: the server
    /// has every block, nothing is sent but one change naming them; renamed
    /// back on that device, the first sees it, with nothing sent either.
    @Test(arguments: Backend.allCases)
    func aRenamedGigabyteFileAndACopyOfItSendNoContent(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-gigabyte"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let blocks = 256
        let size = Int64(blocks) * Int64(Blocks.size)
        let lap = Laps("gigabyte (\(backend))")

        try Mirror.mkdir(a.path("Videos"))
        let digest = try Self.writeDistinctBlocks(a.path("big.bin"), blocks: blocks, seed: 1024)
        lap("written")
        try Mirror.waitFor("the 1 GiB file on the other device", drives, within: 600) { Self.size(b.path("big.bin")) == size }
        try Self.waitUntilUpToDate(a, drives)
        lap("sent")

        // Renamed and moved at once, on the laptop.
        let renamed = try Self.received("the rename", server, from: a, drives) {
            #expect(rename(a.path("big.bin"), a.path("Videos/holiday 2026.bin")) == 0)
        } arrived: {
            Self.size(b.path("Videos/holiday 2026.bin")) == size && !Self.exists(b.path("big.bin"))
        }
        #expect(renamed.blockUploads == 0, "a rename sent blocks")
        #expect(renamed.uploadPlans.isEmpty, "a rename asked for an upload plan")
        #expect(renamed.nodes == 1 && renamed.treeRequests == 1)
        lap("renamed")
        #expect(try sha256Hex(ofFile: b.path("Videos/holiday 2026.bin")) == digest)
        lap("read on the other device")

        // Copied on the desktop: the server has the content.
        let copied = try Self.received("the copy", server, from: b, drives) {
            let cp = try runCommand("/bin/cp", [b.path("Videos/holiday 2026.bin"), b.path("Videos/copy.bin")])
            #expect(cp.status == 0, "\(cp.stderr)")
        } arrived: {
            Self.size(a.path("Videos/copy.bin")) == size
        }
        #expect(copied.blockUploads == 0, "a copy of content the server has sent blocks")
        // The put names the content and its 256 blocks: the server has them, so it is
        // taken at once, without a question of its own.
        #expect(copied.uploadPlans.isEmpty, "a copy of content the server has asked for an upload plan")
        #expect(copied.nodes == 1)
        #expect(try sha256Hex(ofFile: a.path("Videos/copy.bin")) == digest)
        lap("copied, sent and read")

        // Renamed on the desktop: the laptop sees it, nothing sent.
        let back = try Self.received("the desktop's rename", server, from: b, drives) {
            #expect(rename(b.path("Videos/copy.bin"), b.path("copy of the holiday.bin")) == 0)
        } arrived: {
            Self.size(a.path("copy of the holiday.bin")) == size && !Self.exists(a.path("Videos/copy.bin"))
        }
        #expect(back.blockUploads == 0 && back.uploadPlans.isEmpty && back.nodes == 1)
        #expect(try sha256Hex(ofFile: a.path("copy of the holiday.bin")) == digest)
        for d in drives {
            let top = try FileManager.default.contentsOfDirectory(atPath: d.mountPoint).filter { !["Camera Roll", "Backups", ".backup"].contains($0) }
            #expect(top.sorted() == ["Videos", "copy of the holiday.bin"])
            #expect(try FileManager.default.contentsOfDirectory(atPath: d.path("Videos")) == ["holiday 2026.bin"])
        }
        lap("renamed back and compared")
    }

    /// A folder of 10,000 files moved into another folder is one change and sends no
    /// content; the other device has every file under the new path with its bytes. Moved
    /// again there, the first device follows the same way.
    @Test(arguments: Backend.allCases)
    func aMovedFolderOfTenThousandFilesIsOneChange(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-many"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let count = 10_000
        // One file in 100 has bytes of its own, the others are empty: each content costs
        // the setup a plan, an upload and, on the other device, a block list, one file
        // after another (a content per file made the setup 4-8 minutes here instead of
        // 1-4), while the move sends none of them either way.
        func content(_ i: Int) -> [UInt8] { i % 100 == 0 ? pseudoRandomBytes(1000 + i / 10, seed: UInt64(i)) : [] }
        func name(_ i: Int) -> String { "f\(i).txt" }
        func entries(_ path: String) -> Int { (try? FileManager.default.contentsOfDirectory(atPath: path).count) ?? -1 }
        func expectEveryFile(in folder: String) throws {
            for i in 0..<count where try readFile(folder + "/" + name(i)) != content(i) {
                Issue.record("\(folder)/\(name(i)) does not hold its own bytes")
                return
            }
        }
        let lap = Laps("many (\(backend))")

        try Mirror.mkdir(a.path("Archive"))
        try Mirror.mkdir(a.path("Many"))
        for i in 0..<count { try writeFile(a.path("Many/" + name(i)), content(i)) }
        lap("written")
        try Mirror.waitFor("every file on the other device", drives, within: 900) { entries(b.path("Many")) == count }
        try Self.waitUntilUpToDate(a, drives, within: 300)
        lap("sent")

        let moved = try Self.received("the move", server, from: a, drives) {
            #expect(rename(a.path("Many"), a.path("Archive/Many of 2026")) == 0)
        } arrived: {
            entries(b.path("Archive/Many of 2026")) == count && !Self.exists(b.path("Many"))
        }
        #expect(moved.blockUploads == 0 && moved.uploadPlans.isEmpty)
        #expect(moved.nodes == 1 && moved.treeRequests == 1)
        lap("moved")
        try expectEveryFile(in: b.path("Archive/Many of 2026"))
        lap("read on the other device")

        // Moved back to the root under another name, on the desktop.
        let movedBack = try Self.received("the desktop's move", server, from: b, drives) {
            #expect(rename(b.path("Archive/Many of 2026"), b.path("Many again")) == 0)
        } arrived: {
            entries(a.path("Many again")) == count && !Self.exists(a.path("Archive/Many of 2026"))
        }
        #expect(movedBack.blockUploads == 0 && movedBack.uploadPlans.isEmpty && movedBack.nodes == 1)
        try expectEveryFile(in: a.path("Many again"))
        lap("moved back and read")
    }
}

extension WorkspaceMirrorScaleTests {
    // MARK: - 2. A file open for writing here

    /// The desktop holds two files open for writing, and writes, while the laptop rewrites
    /// one and deletes the other. The desktop's bytes stay under its writer (its mirror
    /// holds the server's changes back); once it closes, the rules of Docs/sync.md decide:
    /// the laptop's rewrite reached the server first and keeps the name, the desktop's
    /// version becomes a conflict copy beside it; the desktop's edit beats the laptop's
    /// delete. Nothing is lost on either device.
    @Test(arguments: Backend.allCases)
    func aRemoteChangeNeverReplacesTheBytesUnderAWriter(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-writer"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        let base = pseudoRandomBytes(100_000, seed: 31)
        try writeFile(a.path("plan.txt"), base)
        try writeFile(a.path("gone.txt"), Array("the base of a file deleted there".utf8))
        try Mirror.waitForSameTree(drives)
        try Mirror.waitFor("the plan synced on the desktop", drives) { xattr(b.path("plan.txt"), "user.vdrive.sync") == "synced" }

        // The desktop opens both for writing and writes.
        let plan = try FileIO.open(b.path("plan.txt"), O_RDWR)
        var planOpen = true
        defer { if planOpen { close(plan) } }
        let gone = try FileIO.open(b.path("gone.txt"), O_WRONLY | O_APPEND)
        var goneOpen = true
        defer { if goneOpen { close(gone) } }
        let first = Array("the desktop's first part, written while the laptop changes the file; ".utf8)
        try first.withUnsafeBytes { try FileIO.pwrite(plan, $0, at: 0) }
        let addition = Array(", and the desktop's addition".utf8)
        #expect(write(gone, addition, addition.count) == addition.count)

        // The laptop rewrites one and deletes the other; both reach the server.
        let laptops = pseudoRandomBytes(80_000, seed: 32)
        try writeFile(a.path("plan.txt"), laptops)
        try FileManager.default.removeItem(atPath: a.path("gone.txt"))
        try Self.waitUntilUpToDate(a, drives)
        // The desktop's mirror has both and holds them back.
        try Mirror.waitFor("the desktop holding two changes of the server", drives) { Self.status(b).contains("2 to apply") }
        var mine = base
        mine.replaceSubrange(0..<first.count, with: first)
        #expect(try readFile(b.path("plan.txt")) == mine, "the bytes under the desktop's writer")
        #expect(xattr(b.path("plan.txt"), "user.vdrive.sync") == "pending")

        // It writes more through the same descriptor, reads it back through it, and closes.
        let second = Array("and the second part.".utf8)
        try second.withUnsafeBytes { try FileIO.pwrite(plan, $0, at: Int64(base.count)) }
        mine += second
        var back = [UInt8](repeating: 0, count: mine.count)
        let read = try back.withUnsafeMutableBytes { try FileIO.pread(plan, into: $0, at: 0) }
        #expect(read == mine.count && back == mine)
        #expect(try readFile(b.path("gone.txt")) == Array("the base of a file deleted there, and the desktop's addition".utf8))
        close(plan); planOpen = false
        close(gone); goneOpen = false

        try Mirror.waitForSameTree(drives, within: 90)
        for d in drives {
            let tree = try Mirror.snapshot(d.mountPoint)
            let plans = tree.keys.filter { $0.hasPrefix("plan") }.sorted()
            #expect(plans.count == 2, "\(d.mountPoint): \(plans)")
            // The laptop's rewrite reached the server first: it keeps the name.
            #expect(try readFile(d.path("plan.txt")) == laptops)
            let copy = try #require(plans.first { $0.hasPrefix("plan (conflict from desktop ") && $0.hasSuffix(").txt") }, "\(plans)")
            #expect(try readFile(d.path(copy)) == mine, "\(d.mountPoint): the desktop's version in \(copy)")
            // The desktop's edit beats the laptop's delete.
            #expect(try readFile(d.path("gone.txt")) == Array("the base of a file deleted there, and the desktop's addition".utf8))
        }
        // Every version is on the server: the base, the laptop's, the desktop's.
        let hashes = Set(server.records("SELECT DISTINCT hash FROM tree_versions"))
        for bytes in [base, laptops, mine] {
            #expect(hashes.contains(ContentHash.of(blocks: [SHA256Hasher.digest(bytes)]).hex))
        }
    }

    // MARK: - 3. The server down mid-sync, a mount killed mid-upload

    /// The server is killed (SIGKILL) while a 96 MiB file goes up from the laptop; while
    /// it is down both devices change the workspace. Restarted, every change arrives on the
    /// other device, and the big file goes on where the server had it: it receives fewer
    /// bytes than the whole file after the restart. Then the laptop's mount is killed
    /// while it uploads another 96 MiB file and mounted again on its state folder: the
    /// upload resumes mid-file, and the file arrives whole.
    @Test(arguments: Backend.allCases)
    func theServerDownMidSyncLosesNothingAndUploadsResumeMidFile(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-outage"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        try Mirror.mkdir(a.path("Docs"))
        try writeFile(a.path("Docs/a.txt"), Array("a, as it was".utf8))
        try writeFile(a.path("Docs/b.txt"), Array("b, as it was".utf8))
        try writeFile(a.path("Docs/old name.txt"), Array("renamed while the server is down".utf8))
        try writeFile(a.path("Docs/doomed.txt"), Array("deleted while the server is down".utf8))
        try Mirror.waitForSameTree(drives)
        // The laptop's mount in the foreground, so that it can be killed later.
        try a.unmount()
        try a.startForeground()

        let blocks = 24
        let size = Int64(blocks) * Int64(Blocks.size)
        var held = server.blockCount()
        let big = try Self.writeDistinctBlocks(a.path("big.bin"), blocks: blocks, seed: 96)
        try Mirror.waitFor("part of the file on the server", drives, within: 120) { server.blockCount() >= held + 3 }
        server.stopServer(signal: SIGKILL)
        let atKill = server.blockCount() - held
        print("outage (\(backend)): the server killed with \(atKill) of \(blocks) blocks stored")

        // Both devices change the workspace while it is down.
        try writeFile(a.path("Docs/a.txt"), Array("a, edited on the laptop while the server was down".utf8))
        #expect(rename(a.path("Docs/old name.txt"), a.path("Docs/new name.txt")) == 0)
        try Mirror.mkdir(a.path("Laptop"))
        try writeFile(b.path("Docs/b.txt"), Array("b, edited on the desktop while the server was down".utf8))
        try FileManager.default.removeItem(atPath: b.path("Docs/doomed.txt"))
        try Mirror.mkdir(b.path("Desktop"))
        try writeFile(b.path("Desktop/new.txt"), Array("made on the desktop while the server was down".utf8))
        try Mirror.waitFor("both devices waiting for the server", drives) {
            Self.status(a).contains("waiting for the workspace server") && Self.status(b).contains("waiting for the workspace server")
        }

        var mark = server.logMark()
        try server.start()
        try Mirror.waitForSameTree(drives, within: 180)
        let expected: [String: String] = [
            "Docs/a.txt": "a, edited on the laptop while the server was down",
            "Docs/b.txt": "b, edited on the desktop while the server was down",
            "Docs/new name.txt": "renamed while the server is down",
            "Desktop/new.txt": "made on the desktop while the server was down",
        ]
        for d in drives {
            for (path, text) in expected { #expect((try? readFile(d.path(path))) == Array(text.utf8), "\(d.mountPoint)/\(path)") }
            #expect(!Self.exists(d.path("Docs/doomed.txt")) && !Self.exists(d.path("Docs/old name.txt")))
            #expect(Self.exists(d.path("Laptop")) && Self.exists(d.path("Desktop")))
        }
        #expect(try sha256Hex(ofFile: b.path("big.bin")) == big)
        // After the restart the server received the rest of the file, not all of it again
        // (one small content, the laptop's edit, went up beside it).
        var sent = server.accessLog(since: mark)
        Self.expectResumed(sent, backend: backend, device: "laptop", blocks: blocks, otherContents: 1, what: "after the server's restart")

        // The laptop's mount killed mid-upload, then mounted again on its state folder.
        held = server.blockCount()
        let second = try Self.writeDistinctBlocks(a.path("second.bin"), blocks: blocks, seed: 97)
        try Mirror.waitFor("part of the second file on the server", drives, within: 120) { server.blockCount() >= held + 3 }
        a.kill9()
        print("outage (\(backend)): the mount killed with \(server.blockCount() - held) of \(blocks) blocks stored")
        mark = server.logMark()
        try a.start()
        try Mirror.waitFor("the second file on the other device", drives, within: 180) { Self.size(b.path("second.bin")) == size }
        #expect(try sha256Hex(ofFile: b.path("second.bin")) == second)
        try Self.waitUntilUpToDate(a, drives)
        sent = server.accessLog(since: mark)
        Self.expectResumed(sent, backend: backend, device: "laptop", blocks: blocks, otherContents: 0, what: "after the mount's restart")
        try Mirror.waitForSameTree(drives)
    }

    /// Fewer of a file's blocks reached the server in `lines` than the file has: tus
    /// PATCH bytes (embedded: the bytes themselves, less than the whole file) or the
    /// device's block verifications (scaled: one per block PUT to the store, fewer than
    /// the file's blocks). `otherContents`: small contents (one block each) that went up
    /// beside it.
    static func expectResumed(_ lines: [AccessLine], backend: Backend, device: String, blocks: Int, otherContents: Int, what: String) {
        let uploads = lines.filter(\.isBlockUpload)
        switch backend {
        case .embedded:
            let bytes = uploads.map(\.bytesIn).reduce(0, +)
            print("resumed (\(backend)) \(what): \(bytes) bytes of \(blocks * Blocks.size) received")
            #expect(bytes < Int64(blocks) * Int64(Blocks.size), "\(what): the server received \(bytes) bytes, the whole file again")
        case .scaled:
            let verified = uploads.filter { $0.device == device }.count - otherContents
            print("resumed (\(backend)) \(what): \(verified) blocks of \(blocks) stored")
            #expect(verified < blocks, "\(what): \(verified) of the file's \(blocks) blocks were sent again")
        }
    }

    // MARK: - 4. A local failure is never a delete or an empty version

    /// A file edited here whose new content cannot be read back from the drive's block
    /// store (its block file removed, or its bytes damaged) is neither sent empty nor
    /// deleted: the server keeps the old version, the other device keeps the old bytes,
    /// the file says `failed` (and `user.vdrive.sync-error` why) and the status says what
    /// failed, while other changes still go up; the file's next edit goes.
    @Test(arguments: Backend.allCases)
    func aBlockLostHereIsAFailureNeverADeleteOrAnEmptyVersion(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-lost-block"); defer { dir.remove() }
        let (server, drives) = try Mirror.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        // Larger than a block kept in the catalog (InlineBlocks.limit): a file of its own.
        let old = (0..<2).map { pseudoRandomBytes(200_000, seed: 41 + UInt64($0)) }
        let new = (0..<2).map { pseudoRandomBytes(200_000, seed: 51 + UInt64($0)) }
        let names = ["missing.bin", "damaged.bin"]
        for (name, bytes) in zip(names, old) { try writeFile(a.path(name), bytes) }
        try Mirror.waitForSameTree(drives)

        // Edited with the server down (so that nothing goes up yet), then the new blocks
        // are lost from the laptop's store: one removed, one overwritten.
        server.stopServer()
        for (name, bytes) in zip(names, new) { try writeFile(a.path(name), bytes) }
        for name in names { try Mirror.waitFor("\(name) pending", drives) { xattr(a.path(name), "user.vdrive.sync") == "pending" } }
        let missing = OnlineContentTests.blockFile(a, new[0])
        let damaged = OnlineContentTests.blockFile(a, new[1])
        #expect(Self.exists(missing) && Self.exists(damaged))
        try FileManager.default.removeItem(atPath: missing)
        try writeFile(damaged, pseudoRandomBytes(200_000, seed: 61))
        try server.start()

        try Mirror.waitFor("the status naming the failure", drives) { Self.status(a).contains("failed") }
        print("lost block (\(backend)): \(Self.status(a))")
        // Each said in the mount's log (the status line holds the last one).
        for name in names {
            try Mirror.waitFor("the log naming \(name)", drives) { OnlineContentTests.log(a).contains("could not send '\(name)'") }
        }
        // Other changes still go up.
        try writeFile(a.path("after.txt"), Array("made after the failure".utf8))
        try Mirror.waitFor("a later change on the other device", drives) { Self.exists(b.path("after.txt")) }
        for (name, bytes) in zip(names, old) {
            #expect(try readFile(b.path(name)) == bytes, "the desktop keeps the old \(name)")
            // The file says it failed, and why.
            #expect(xattr(a.path(name), "user.vdrive.sync") == "failed")
            #expect(xattr(a.path(name), "user.vdrive.sync-error")?.contains("could not send '\(name)'") == true)
        }
        #expect(!Self.status(a).contains("Workspace: up to date"))
        // On the server: each file live, its one version the old content, nothing empty.
        let live = server.records("SELECT name FROM tree_nodes WHERE deleted_at IS NULL AND name IN ('missing.bin', 'damaged.bin') ORDER BY name")
        #expect(live == ["damaged.bin", "missing.bin"])
        let versions = server.records("SELECT v.size FROM tree_versions v JOIN tree_nodes n ON n.id = v.node WHERE n.name IN ('missing.bin', 'damaged.bin')")
        #expect(versions == ["200000", "200000"])

        // The next edit of a failed file goes, and the file is synced again.
        let again = pseudoRandomBytes(150_000, seed: 63)
        try writeFile(a.path(names[0]), again)
        try Mirror.waitFor("the next edit on the other device", drives) { (try? readFile(b.path(names[0]))) == again }
        try Mirror.waitFor("the file synced again", drives) { xattr(a.path(names[0]), "user.vdrive.sync") == "synced" }
        #expect(xattr(a.path(names[0]), "user.vdrive.sync-error") == nil)
    }
}

/// Prints how long each step of a test took (its wall time, step by step, in the output).
final class Laps {
    private let label: String
    private var last = Date()

    init(_ label: String) { self.label = label }

    func callAsFunction(_ step: String) {
        print("\(label): \(step) \(String(format: "%.1f", -last.timeIntervalSinceNow)) s")
        last = Date()
    }
}
