import Testing
import Foundation
import Crypto
import Storage

/// Tier two: a real mount in a temporary folder, through the built `vdrive` binary.
@Suite(.tags(.mount), .needsMount, .serialized) struct MountBehaviourTests {
    @Test func behavesLikeAPlainFolder() throws {
        let plain = TemporaryDirectory("vdrive-plain")
        defer { plain.remove() }
        let drive = try MountedDrive()
        defer { drive.stop() }
        try FileManager.default.createDirectory(atPath: drive.path("work"), withIntermediateDirectories: false)
        try FileManager.default.createDirectory(atPath: plain.path + "/work", withIntermediateDirectories: false)

        var expected = PosixScenario(root: plain.path + "/work")
        expected.run()
        var actual = PosixScenario(root: drive.path("work"))
        actual.run()
        for (i, line) in expected.transcript.enumerated() {
            let got = i < actual.transcript.count ? actual.transcript[i] : "<missing>"
            #expect(got == line, "step \(i)")
        }
        #expect(actual.transcript.count == expected.transcript.count)
        #expect(expected.transcript.count > 80)
        if ProcessInfo.processInfo.environment["VDRIVE_SHOW_TRANSCRIPT"] != nil { print(actual.transcript.joined(separator: "\n")) }
    }

    /// The mount table names the drive's state folder as the mount's source (`df` shows
    /// it; the command line finds a drive's catalog from a path on it), whatever the
    /// folder's name holds: a space and a comma, which libfuse's option list must escape.
    @Test func theMountTableNamesTheStateFolder() throws {
        let dir = TemporaryDirectory("vdrive-source"); defer { dir.remove() }
        let state = dir.path + "/state of mine, here"
        let drive = try MountedDrive(state: state)
        defer { drive.stop() }
        let info = try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
        let line = try #require(info.split(separator: "\n").first { $0.split(separator: " ")[4] == drive.mountPoint }, "\(info)")
        let fields = line.split(separator: " ")
        let dash = try #require(fields.firstIndex(of: "-"))
        #expect(fields[dash + 1] == "fuse.vdrive")
        #expect(fields[dash + 2].replacingOccurrences(of: "\\040", with: " ") == state, "\(line)")
    }

    @Test func newWorkspaceHasCameraRollAndSurvivesRemount() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        var isDir: ObjCBool = false
        #expect(FileManager.default.fileExists(atPath: drive.path("Camera Roll"), isDirectory: &isDir) && isDir.boolValue)

        let photos = try FileManager.default.contentsOfDirectory(atPath: fixturesPath).filter { !$0.hasPrefix(".") }
        for name in photos {
            try FileManager.default.copyItem(atPath: fixturesPath + "/" + name, toPath: drive.path("Camera Roll/" + name))
        }
        let big = pseudoRandomBytes(5 << 20, seed: 42)
        try writeFile(drive.path("big.bin"), big)
        try FileManager.default.createDirectory(atPath: drive.path("x/y/z"), withIntermediateDirectories: true)
        try "deep".write(toFile: drive.path("x/y/z/deep.txt"), atomically: true, encoding: .utf8)
        try drive.unmount()
        #expect(!isMounted(drive.mountPoint))
        try drive.start()
        for name in photos {
            #expect(try sha256(ofFile: drive.path("Camera Roll/" + name)) == sha256(ofFile: fixturesPath + "/" + name))
        }
        #expect(try readFile(drive.path("big.bin")) == big)
        #expect(try String(contentsOfFile: drive.path("x/y/z/deep.txt"), encoding: .utf8) == "deep")
    }

    @Test func identicalContentIsStoredOnceAndFreedWhenUnused() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let bytes = pseudoRandomBytes(300_000, seed: 7)
        try writeFile(drive.path("one"), bytes)
        try writeFile(drive.path("two"), bytes)
        let digest = SHA256Hasher.digest(bytes)
        let blobsRoot = drive.state + "/blobs"
        let store = try BlobStore(root: blobsRoot)
        #expect(try store.allDigests() == [digest])
        try FileManager.default.removeItem(atPath: drive.path("one"))
        #expect(store.contains(digest))
        try FileManager.default.removeItem(atPath: drive.path("two"))
        // The kernel may still hold a lookup on the inode: the blob goes once it forgets.
        for _ in 0..<50 where store.contains(digest) { usleep(100_000) }
        try drive.unmount()
        #expect(!store.contains(digest))
    }

    @Test func readdirOfALargeFolderIsCompleteAndStableUnderChanges() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let dir = drive.path("many")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        let count = 100_000
        for i in 0..<count {
            let fd = open(dir + "/f\(i)", O_CREAT | O_WRONLY, 0o644)
            try #require(fd >= 0, "create f\(i): errno \(errno)")
            close(fd)
        }
        // List while another thread removes and adds names: every name that exists
        // throughout the listing must appear exactly once.
        let stable = Set((0..<count).filter { $0 % 10 != 0 }.map { "f\($0)" })
        let churn = Thread { [dir] in
            for i in stride(from: 0, to: count, by: 10) {
                unlink(dir + "/f\(i)")
                close(open(dir + "/g\(i)", O_CREAT | O_WRONLY, 0o644))
            }
        }
        churn.start()
        var seen: [String: Int] = [:]
        let d = try #require(opendir(dir), "opendir: errno \(errno)")
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(cString: $0.baseAddress!.assumingMemoryBound(to: CChar.self)) }
            seen[name, default: 0] += 1
        }
        closedir(d)
        try eventually("the churn thread finishes", within: 120) { churn.isFinished }
        #expect(stable.allSatisfy { seen[$0] == 1 })
        #expect(seen.values.allSatisfy { $0 == 1 })
        let final = try FileManager.default.contentsOfDirectory(atPath: dir)
        #expect(final.count == count)
    }

    @Test func concurrentWritersToDifferentFiles() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let writers = 8
        let expected = (0..<writers).map { pseudoRandomBytes(2_000_000 + $0 * 1000, seed: UInt64($0 + 1)) }
        let base = drive.mountPoint
        DispatchQueue.concurrentPerform(iterations: writers) { i in
            let fd = open(base + "/w\(i)", O_CREAT | O_WRONLY | O_TRUNC, 0o644)
            expected[i].withUnsafeBytes { b in
                var off = 0
                while off < b.count {
                    let n = Glibc.write(fd, b.baseAddress! + off, min(65536 + i * 100, b.count - off))
                    if n <= 0 { break }
                    off += n
                }
            }
            close(fd)
        }
        for i in 0..<writers { #expect(try readFile(drive.path("w\(i)")) == expected[i]) }
    }

    /// Write-only handles write past the page cache (direct I/O); readers keep theirs.
    @Test func aWriteOnlyHandlesBytesReachAReaderWithCachedPages() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let path = drive.path("shared.bin")
        let original = pseudoRandomBytes(3 * 65536, seed: 7)
        try writeFile(path, original)

        let reader = open(path, O_RDONLY)
        try #require(reader >= 0, "open for reading: errno \(errno)")
        var head = [UInt8](repeating: 0, count: original.count)
        #expect(pread(reader, &head, head.count, 0) == original.count)   // now in the page cache
        #expect(head == original)

        let writer = open(path, O_WRONLY)
        try #require(writer >= 0, "open for writing: errno \(errno)")
        let patch = [UInt8](repeating: 0xAB, count: 5000)
        #expect(pwrite(writer, patch, patch.count, 65536 - 100) == patch.count)
        var expected = original
        expected.replaceSubrange((65536 - 100)..<(65536 - 100 + patch.count), with: patch)
        var seen = [UInt8](repeating: 0, count: expected.count)
        #expect(pread(reader, &seen, seen.count, 0) == expected.count)
        #expect(seen == expected, "the reader's cached pages were not dropped by the write")
        #expect(close(writer) == 0)

        let appender = open(path, O_WRONLY | O_APPEND)
        try #require(appender >= 0, "open for appending: errno \(errno)")
        let tail = Array("one more line\n".utf8)
        #expect(Glibc.write(appender, tail, tail.count) == tail.count)
        #expect(close(appender) == 0)
        expected += tail

        var st = stat()
        #expect(stat(path, &st) == 0)
        #expect(Int(st.st_size) == expected.count)
        seen = [UInt8](repeating: 0, count: expected.count + 10)
        #expect(pread(reader, &seen, seen.count, 0) == expected.count)
        #expect(Array(seen.prefix(expected.count)) == expected)
        close(reader)
        #expect(try readFile(path) == expected)
        try drive.unmount()
        try drive.start()
        #expect(try readFile(path) == expected)
    }

    /// Large aligned writes go to the staging file past the page cache (O_DIRECT); small
    /// and unaligned ones through it. Mixed in one file, read back while it is open,
    /// after close and after a remount: the same bytes.
    @Test func directAndCachedWritesToOneFileReadBackTheSame() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let path = drive.path("mixed.bin")
        var expected = pseudoRandomBytes(6 << 20, seed: 11)   // a block and a half
        let writer = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        try #require(writer >= 0, "create: errno \(errno)")
        let chunk = 1 << 20
        for start in stride(from: 0, to: expected.count, by: chunk) {   // 1 MiB, aligned: direct
            let n = expected[start..<(start + chunk)].withUnsafeBytes { pwrite(writer, $0.baseAddress, chunk, off_t(start)) }
            #expect(n == chunk)
        }
        let other = open(path, O_RDWR)
        try #require(other >= 0, "open read-write: errno \(errno)")
        var seen = [UInt8](repeating: 0, count: expected.count)
        #expect(pread(other, &seen, seen.count, 0) == expected.count)
        #expect(seen == expected, "read back while open")
        let patch = pseudoRandomBytes(10_000, seed: 12)   // small and unaligned, inside a direct range
        #expect(pwrite(other, patch, patch.count, 3 * chunk + 123) == patch.count)
        expected.replaceSubrange((3 * chunk + 123)..<(3 * chunk + 123 + patch.count), with: patch)
        let again = pseudoRandomBytes(chunk, seed: 13)   // direct again, over the patched range
        #expect(pwrite(writer, again, chunk, off_t(4 * chunk)) == chunk)
        expected.replaceSubrange((4 * chunk)..<(5 * chunk), with: again)
        #expect(pread(other, &seen, seen.count, 0) == expected.count)
        #expect(seen == expected, "read back after both kinds of write")
        #expect(close(other) == 0)
        #expect(close(writer) == 0)
        #expect(try readFile(path) == expected)
        try drive.unmount()
        try drive.start()
        #expect(try readFile(path) == expected)
    }

    @Test func statfsReportsTheStateDisk() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        var a = statvfs(), b = statvfs()
        #expect(statvfs(drive.mountPoint, &a) == 0)
        #expect(statvfs(drive.state, &b) == 0)
        #expect(a.f_blocks * a.f_frsize == b.f_blocks * b.f_frsize)
        #expect(a.f_namemax == 255)
    }

    @Test func cpArchiveAndRsyncPreserveEverything() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let source = TemporaryDirectory("vdrive-src")
        defer { source.remove() }
        try FileManager.default.createDirectory(atPath: source.path + "/tree/sub", withIntermediateDirectories: true)
        try writeFile(source.path + "/tree/a.bin", pseudoRandomBytes(1_500_000, seed: 3))
        try writeFile(source.path + "/tree/sub/b.txt", Array("b".utf8))
        symlink("a.bin", source.path + "/tree/link")
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        utimensat(AT_FDCWD, source.path + "/tree/a.bin", &times, 0)
        chmod(source.path + "/tree/sub/b.txt", 0o640)
        #expect(try runCommand("/bin/cp", ["-a", source.path + "/tree", drive.path("cp")]).status == 0)
        let rsync = try runCommand("/usr/bin/rsync", ["-aX", source.path + "/tree/", drive.path("rs/")])
        #expect(rsync.status == 0, "\(rsync.stderr)")
        for copy in ["cp", "rs"] {
            var st = stat()
            #expect(lstat(drive.path("\(copy)/a.bin"), &st) == 0)
            #expect(st.st_mtim.tv_sec == 1_000_000_000)
            #expect(lstat(drive.path("\(copy)/sub/b.txt"), &st) == 0)
            #expect(st.st_mode & 0o777 == 0o640)
            #expect(lstat(drive.path("\(copy)/link"), &st) == 0 && st.st_mode & S_IFMT == S_IFLNK)
            #expect(try sha256(ofFile: drive.path("\(copy)/a.bin")) == sha256(ofFile: source.path + "/tree/a.bin"))
        }
        let diff = try runCommand("/usr/bin/diff", ["-r", source.path + "/tree", drive.path("cp")])
        #expect(diff.status == 0, "\(diff.stdout)")
        // tar round trip.
        #expect(try runCommand("/bin/tar", ["-cf", drive.path("t.tar"), "-C", source.path, "tree"]).status == 0)
        try FileManager.default.createDirectory(atPath: drive.path("untar"), withIntermediateDirectories: false)
        #expect(try runCommand("/bin/tar", ["-xf", drive.path("t.tar"), "-C", drive.path("untar")]).status == 0)
        #expect(try runCommand("/usr/bin/diff", ["-r", source.path + "/tree", drive.path("untar/tree")]).status == 0)
    }
}
