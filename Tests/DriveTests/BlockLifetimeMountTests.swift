import Testing
import Foundation
import Crypto
import Storage

/// Content deleted and saved again through a real mount, as a user does it (`cp`, `rm`,
/// `cp` of the same bytes), across a clean remount and a SIGKILL of the mount; then
/// `vdrive check` on the unmounted state folder. Groups commit every second here, so a
/// delete and the save after it always share one group.
@Suite(.tags(.mount), .needsMount, .serialized) struct BlockLifetimeMountTests {
    static let sizes = [1, 65_536, 300_000, 4 << 20, (4 << 20) + 1, (8 << 20) + 7]
    static let folders = ["", "Camera Roll/"]

    static func check(_ drive: MountedDrive) throws -> CommandResult {
        try drive.vdrive(["check", "--state", drive.state])
    }

    static func fsync(_ path: String) throws {
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0, "open \(path): errno \(errno)")
        defer { close(fd) }
        #expect(Glibc.fsync(fd) == 0)
    }

    @Test(arguments: sizes, folders)
    func savedDeletedAndSavedAgainReadsBackAfterAKillAndARemount(size: Int, folder: String) throws {
        let drive = try MountedDrive(label: "vdrive-lifetime", environment: ["VDRIVE_COMMIT_WINDOW_MS": "1000"], start: false)
        defer { drive.stop() }
        let bytes = pseudoRandomBytes(size, seed: UInt64(size) &* 31)
        let f = drive.path(folder + "f.jpg"), g = drive.path(folder + "g.jpg")

        // Saved, deleted, saved again; read while mounted; then made durable and killed.
        // The kernel's forget of the deleted file (which drops its blocks) races with the
        // next save: a few pauses between the two let it come before, and after.
        try drive.startForeground()
        try writeFile(f, bytes)
        for pause: UInt32 in [0, 2_000, 20_000, 100_000] {
            #expect(unlink(f) == 0)
            usleep(pause)
            try writeFile(f, bytes)
        }
        #expect(try readFile(f) == bytes, "read back while mounted")
        try Self.fsync(f)
        drive.kill9()
        var r = try Self.check(drive)
        #expect(r.status == 0, "vdrive check after the kill: \(r.stdout) \(r.stderr)")
        try drive.start()
        #expect(try readFile(f) == bytes, "read back after a kill -9")

        // Shared by a second file; the first deleted and saved again; a clean remount.
        try writeFile(g, bytes)
        #expect(unlink(f) == 0)
        try writeFile(f, bytes)
        #expect(unlink(g) == 0)
        try drive.unmount()
        r = try Self.check(drive)
        #expect(r.status == 0, "vdrive check after the unmount: \(r.stdout) \(r.stderr)")
        #expect(!r.stdout.contains("no row names"), "a block file nothing names was kept: \(r.stdout)")
        try drive.start()
        #expect(try readFile(f) == bytes, "read back after a remount")
        try drive.unmount()
    }

    @Test func checkReportsAMissingAndAWrongBlockWithTheirFiles() throws {
        let drive = try MountedDrive(label: "vdrive-check")
        defer { drive.stop() }
        let a = pseudoRandomBytes(300_000, seed: 1), b = pseudoRandomBytes(200_000, seed: 2)
        try writeFile(drive.path("Camera Roll/a.jpg"), a)
        try writeFile(drive.path("b.bin"), b)
        try drive.unmount()
        var r = try Self.check(drive)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("Every block is present and sound"))

        let blobs = try BlobStore(root: drive.state + "/blobs")
        let da = SHA256Hasher.digest(a), db = SHA256Hasher.digest(b)
        #expect(unlink(blobs.path(for: da)) == 0)
        chmod(blobs.path(for: db), 0o600)
        var wrong = b
        wrong[7] ^= 1
        try writeFile(blobs.path(for: db), wrong, flags: O_WRONLY)
        r = try Self.check(drive)
        #expect(r.status == 65, "sysexits EX_DATAERR: \(r.status)")
        #expect(r.stdout.contains("missing: block \(da.hex), used by 'Camera Roll/a.jpg'"), "\(r.stdout)")
        #expect(r.stdout.contains("wrong bytes: block \(db.hex), used by 'b.bin'"), "\(r.stdout)")
        #expect(r.stderr.contains("2 block(s)"), "\(r.stderr)")

        r = try drive.vdrive(["check", "--state", drive.root.path + "/nothing-here"])
        #expect(r.status == 66, "\(r.stderr)")
        r = try drive.vdrive(["check", "extra", "--state", drive.state])
        #expect(r.status == 64, "\(r.stderr)")
    }
}
