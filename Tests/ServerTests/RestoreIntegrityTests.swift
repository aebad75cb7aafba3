import Crypto
import Foundation
import Protocol
import Storage
import Testing

/// `vdrive restore` killed in the middle of a big file resumes by block, and a damaged
/// download never reaches its name (a real server, a real `vdrive` process, SIGKILL, a
/// proxy that flips a byte).
@Suite(.tags(.endToEnd), .serialized) struct RestoreIntegrityTests {
    typealias Fixture = RestoreTests.Fixture

    /// The hidden temporary file a restore writes `path` into (RestoreFile.swift).
    static func temporary(_ dest: String, _ path: String, _ f: TestFile) -> String {
        let slash = path.lastIndex(of: "/")!
        return dest + "/" + path[..<slash] + "/." + path[path.index(after: slash)...] + "." + f.content.hex.prefix(16) + ".vdrive-restore"
    }

    /// Bytes a rerun must fetch for `f` at `path`: nothing when it is under its name,
    /// else every block its temporary file does not hold with the right bytes.
    static func stillNeeded(_ dest: String, _ path: String, _ f: TestFile) -> Int64 {
        if FileManager.default.fileExists(atPath: dest + "/" + path) { return 0 }
        let left = FileManager.default.contents(atPath: temporary(dest, path, f)).map { [UInt8]($0) } ?? []
        var needed: Int64 = 0
        for (i, block) in f.manifest.blocks.enumerated() {
            let start = i * Blocks.size, end = start + f.manifest.length(ofBlock: i)
            if end <= left.count, SHA256Hasher.digest(Array(left[start..<end])) == block { continue }
            needed += Int64(end - start)
        }
        return needed
    }

    /// Killed with a big file half fetched and several small ones done: the rerun
    /// fetches exactly the blocks that were not on disk yet (counted on the server:
    /// less than the big file), and every file ends byte-equal with its capture date.
    @Test func killedMidBigFileResumesByBlock() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        let smalls = try fx.backUpPhotos(count: 8, size: 1 << 20, seed: 600, first: 3000, capture: RestoreTests.day("2024-02-02"))
        let big = TestFile(in: fx.dir.path, size: 10 * Blocks.size + 12345, seed: 700)
        try fx.backUp(fx.phone, big, "Camera Roll/VID_9000.mov", capture: RestoreTests.day("2024-02-03"), sequence: 100)
        let paths = (0..<8).map { "Camera Roll/IMG_\(3000 + $0).jpg" } + ["Camera Roll/VID_9000.mov"]
        let files = smalls + [big]

        // About 6 s for everything: the big file is fetched last, four blocks at a time;
        // killed with 7 blocks allocated, at least 3 are whole.
        let proxy = try LinkProxy(targetPort: fx.server.port, oneWayDelay: 0.001, bytesPerSecond: 8_000_000)
        defer { proxy.stop() }
        let dest = fx.dir.path + "/restored"
        let process = try fx.startRestore(into: dest, through: proxy)
        let bigTemporary = Self.temporary(dest, paths[8], big)
        let allocated = { (try? FileIO.status(bigTemporary)).map { Int64($0.st_blocks) * 512 } ?? 0 }
        let deadline = Date().addingTimeInterval(60)
        while allocated() < 7 * Int64(Blocks.size) && Date() < deadline && process.isRunning { usleep(5_000) }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()

        let finished = paths.filter { FileManager.default.fileExists(atPath: dest + "/" + $0) }
        #expect(finished.count >= 4 && !finished.contains(paths[8]), "killed with \(finished) finished")
        for (path, f) in zip(paths, files) where finished.contains(path) {  // under its name means complete
            #expect(FileManager.default.contents(atPath: dest + "/" + path) == Data(f.bytes), "\(path)")
        }
        let needed = zip(paths, files).reduce(Int64(0)) { $0 + Self.stillNeeded(dest, $1.0, $1.1) }
        let bigNeeded = Self.stillNeeded(dest, paths[8], big)
        #expect(bigNeeded < big.size - Int64(Blocks.size), "blocks of the big file on disk at the kill: \(big.size - bigNeeded) bytes")

        let before = try fx.serverBytesWritten()
        let (status, out, err) = try fx.restore(["phone", dest])
        let sent = try fx.serverBytesWritten() - before
        #expect(status == 0, "\(err)")
        #expect(out.contains("\(finished.count) already there"), "\(out)")
        // Exactly the blocks that were missing, plus some JSON.
        #expect(sent >= needed && sent < needed + (64 << 10), "server sent \(sent) bytes; \(needed) were missing")
        for (path, f) in zip(paths, files) {
            #expect(FileManager.default.contents(atPath: dest + "/" + path) == Data(f.bytes), "\(path)")
        }
        #expect(try RestoreTests.mtime(dest + "/" + paths[8]) == RestoreTests.day("2024-02-03"))
        #expect(RestoreTests.restoredFiles(dest) == paths, "no temporary file left")
    }

    /// On a terminal (a pty from `script`), the progress line counts files and bytes
    /// and, once the rate is known, shows it with the time left; it ends at 100%.
    @Test func progressLineOnATerminal() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        _ = try fx.backUpPhotos(count: 6, size: 1 << 20, seed: 850, first: 6000, capture: RestoreTests.day("2024-06-06"))
        // About 1.5 s: long enough for a rate (measured over at least 0.5 s).
        let proxy = try LinkProxy(targetPort: fx.server.port, oneWayDelay: 0.001, bytesPerSecond: 4_000_000)
        defer { proxy.stop() }
        let command = [vdriveBinary(), "restore", "phone", fx.dir.path + "/restored", "--server", "http://127.0.0.1:\(proxy.port)",
                       "--token-file", fx.newTokenFile, "--now"].map { "'\($0)'" }.joined(separator: " ")
        let (status, out, err) = try run("/usr/bin/script", ["-qec", command, "/dev/null"])
        #expect(status == 0, "\(out) \(err)")
        #expect(out.contains("% · 0 of 6 files · "), "\(out)")
        #expect(out.contains("MB/s · less than a minute"), "\(out)")
        #expect(out.contains("[####################] 100% · 6 of 6 files · 6.3 MB of 6.3 MB"), "\(out)")
        #expect(out.contains("Restored 6 file(s)"), "\(out)")
    }

    /// A link that flips one bit of a block: the file is reported (65) and nothing
    /// appears under its name; the other file is restored; again over a sound link,
    /// the damaged block is fetched again and the file is right.
    @Test func damagedDownloadNeverReachesItsName() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        let video = TestFile(in: fx.dir.path, size: Blocks.size + 500_000, seed: 800)
        let photo = TestFile(in: fx.dir.path, size: 200_000, seed: 801)
        try fx.backUp(fx.phone, video, "Camera Roll/A_VIDEO.mov", capture: RestoreTests.day("2024-03-03"))
        try fx.backUp(fx.phone, photo, "Camera Roll/B_PHOTO.jpg", capture: RestoreTests.day("2024-03-03"), sequence: 2)
        // One transfer: its connection carries a few KB of JSON, then the video's first
        // block, whose 1 MiB-th byte arrives flipped.
        let proxy = try LinkProxy(targetPort: fx.server.port, oneWayDelay: 0, bytesPerSecond: 1e9, flipReplyByteAt: 1 << 20)
        defer { proxy.stop() }
        let dest = fx.dir.path + "/restored"
        let (status, _, err) = try fx.restore(["phone", dest, "--transfers", "1"], base: "http://127.0.0.1:\(proxy.port)")
        #expect(status == 65, "\(err)")
        #expect(err.contains("not restored: 'Camera Roll/A_VIDEO.mov': the downloaded block hashes to"), "\(err)")
        #expect(!FileManager.default.fileExists(atPath: dest + "/Camera Roll/A_VIDEO.mov"))
        #expect(FileManager.default.contents(atPath: dest + "/Camera Roll/B_PHOTO.jpg") == Data(photo.bytes))

        let (again, out, againErr) = try fx.restore(["phone", dest])
        #expect(again == 0, "\(againErr)")
        #expect(out.contains("Restored 1 file(s)") && out.contains("1 already there"), "\(out)")
        #expect(FileManager.default.contents(atPath: dest + "/Camera Roll/A_VIDEO.mov") == Data(video.bytes))
        #expect(RestoreTests.restoredFiles(dest) == ["Camera Roll/A_VIDEO.mov", "Camera Roll/B_PHOTO.jpg"])
    }
}
