import Testing
import Foundation
import Storage

/// ENOSPC on a small file system made for the test (a 32 MiB tmpfs holding the state).
@Suite(.serialized) struct DiskFullTests {
    @Test func diskFullFailsTheWriterAndKeepsThePreviousVersion() throws {
        let small = TempDir("vdrive-small")
        defer { _ = try? runCommand("/bin/umount", [small.path]); small.remove() }
        let m = try runCommand("/bin/mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", small.path])
        try #require(m.status == 0, "cannot make a small file system: \(m.stderr)")
        let drive = try MountedDrive(state: small.path + "/state", label: "vdrive-enospc")
        defer { drive.stop() }

        let keep = pseudoRandomBytes(1_000_000, seed: 11)
        try writeFile(drive.path("keep.bin"), keep)

        // Overwrite with more than the disk holds: the writer must see ENOSPC.
        let fd = open(drive.path("keep.bin"), O_WRONLY | O_TRUNC)
        try #require(fd >= 0)
        let chunk = pseudoRandomBytes(1 << 20, seed: 12)
        var sawENOSPC = false
        for _ in 0..<64 {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 { #expect(errno == ENOSPC); sawENOSPC = true; break }
        }
        if close(fd) != 0 { #expect(errno == ENOSPC); sawENOSPC = true }
        #expect(sawENOSPC)
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
