import Testing
import Foundation
import Storage

/// ENOSPC on a small file system made for the test (a 32 MiB tmpfs holding the state).
@Suite(.tags(.mount), .needsMount, .serialized) struct DiskFullTests {
    /// A tmpfs of the given size in a temporary folder (the test runs as root).
    func smallDisk(megabytes: Int) throws -> TemporaryDirectory {
        let small = TemporaryDirectory("vdrive-small")
        let m = try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", small.path])
        if m.status != 0 {
            small.remove()
            throw TestFailure("cannot make a small file system: \(m.stderr)")
        }
        return small
    }

    func removeSmallDisk(_ small: TemporaryDirectory) {
        _ = try? runCommand("/bin/umount", [small.path])
        small.remove()
    }

    @Test func diskFullFailsTheWriterAndKeepsThePreviousVersion() throws {
        let small = try smallDisk(megabytes: 32)
        defer { removeSmallDisk(small) }
        let drive = try MountedDrive(state: small.path + "/state", label: "vdrive-enospc")
        defer { drive.stop() }

        let keep = pseudoRandomBytes(1_000_000, seed: 11)
        try writeFile(drive.path("keep.bin"), keep)

        // Overwrite with more than the disk holds: the writer must see ENOSPC. Every close of a
        // descriptor is a commit point (FUSE flush), so the writer is a process of its own that
        // opens once and never dups (shell redirection and dd close a dup right after open,
        // and a fork in this test process would close an inherited copy).
        let writer = """
        import os, sys
        fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
        chunk = os.urandom(1 << 20)
        try:
            for _ in range(64):
                os.write(fd, chunk)
        except OSError as e:
            print("write:", e.strerror)
        try:
            os.close(fd)
        except OSError as e:
            print("close:", e.strerror)
        """
        let r = try runCommand("/usr/bin/python3", ["-c", writer, drive.path("keep.bin")])
        #expect(r.stdout.contains("write: No space left on device"), "writer: \(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("close: No space left on device"), "the failed content is reported again at close")
        #expect(try readFile(drive.path("keep.bin")) == keep, "the previous version must stay intact")

        // Space comes back once the failed staging is gone: the drive works again.
        let after = pseudoRandomBytes(2_000_000, seed: 13)
        try writeFile(drive.path("after.bin"), after)
        #expect(try readFile(drive.path("after.bin")) == after)
        try drive.unmount()
        try drive.start()
        #expect(try readFile(drive.path("keep.bin")) == keep)
        #expect(try readFile(drive.path("after.bin")) == after)
    }

    /// Small files on a full disk, with group commit: the catalog's WAL cannot grow. The
    /// writer hears ENOSPC (the change after a lost group commits on its own), nothing
    /// half-written shows, files closed well before the first error are all there, and
    /// once space is back the drive works and every file it lists is whole.
    @Test func aFullDiskUnderGroupCommitIsReportedAndKeepsEveryListedFileWhole() throws {
        let small = try smallDisk(megabytes: 24)
        defer { removeSmallDisk(small) }
        let drive = try MountedDrive(state: small.path + "/state", label: "vdrive-enospc-group")
        defer { drive.stop() }
        // Leave about 3 MiB free; the filler goes later to give the space back.
        var free = statvfs()
        statvfs(small.path, &free)
        let filler = Int(free.f_bavail) * Int(free.f_frsize) - (3 << 20)
        try writeFile(small.path + "/filler", [UInt8](repeating: 7, count: filler))

        func content(_ i: Int) -> [UInt8] { pseudoRandomBytes(20_000 + i % 7 * 1_000, seed: UInt64(500 + i)) }
        try FileManager.default.createDirectory(atPath: drive.path("many"), withIntermediateDirectories: true)
        var closed: [(index: Int, at: Date)] = []
        var firstError: (index: Int, errno: Int32, at: Date)?
        for i in 0..<2_000 where firstError == nil {
            let fd = open(drive.path("many/f\(i)"), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            if fd < 0 { firstError = (i, errno, Date()); break }
            let bytes = content(i)
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
            let writeErrno = errno
            if close(fd) != 0 || n != bytes.count {
                firstError = (i, n != bytes.count ? writeErrno : errno, Date())
                break
            }
            closed.append((i, Date()))
        }
        let failure = try #require(firstError, "2,000 files of 20 KB fitted in 3 MiB: the disk never filled")
        #expect(failure.errno == ENOSPC, "file \(failure.index) failed with errno \(failure.errno), not ENOSPC; log: \((try? String(contentsOfFile: drive.state + "/vdrive.log", encoding: .utf8)) ?? "none")")

        // Space back: the drive works again, then every file it lists is whole after a remount.
        unlink(small.path + "/filler")
        let after = pseudoRandomBytes(30_000, seed: 99)
        try writeFile(drive.path("after.bin"), after)
        #expect(try readFile(drive.path("after.bin")) == after)
        try drive.unmount()
        try drive.start()
        let listed = Set(try FileManager.default.contentsOfDirectory(atPath: drive.path("many")))
        for name in listed {
            guard let i = Int(name.dropFirst()) else { continue }
            let got = try readFile(drive.path("many/" + name))
            #expect(got == content(i) || got.isEmpty, "\(name) is neither its content nor empty (a file created, never written)")
        }
        let surelyCommitted = failure.at.addingTimeInterval(-1)
        for c in closed where c.at < surelyCommitted {
            #expect(listed.contains("f\(c.index)"), "f\(c.index) was closed a second before the disk filled and is gone")
        }
        #expect(try readFile(drive.path("after.bin")) == after)
    }
}
