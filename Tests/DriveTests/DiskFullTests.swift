import Testing
import Foundation
import Storage

/// ENOSPC on a small file system made for the test (a 32 MiB tmpfs holding the state).
@Suite(.serialized) struct DiskFullTests {
    @Test func diskFullFailsTheWriterAndKeepsThePreviousVersion() throws {
        let small = TemporaryDirectory("vdrive-small")
        defer { _ = try? runCommand("/bin/umount", [small.path]); small.remove() }
        let m = try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", small.path])
        try #require(m.status == 0, "cannot make a small file system: \(m.stderr)")
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
}
