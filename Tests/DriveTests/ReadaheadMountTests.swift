import Testing
import TestTraits
import Foundation
import Crypto
import Storage
import TestSupport

/// Tier three: how many bytes the server sends for the reads a file manager, a
/// thumbnailer, a seeking player and a copy make of content this drive does not hold,
/// through a real mount and a real `vdrive serve`, counted by a proxy between the two.
/// An online-only Camera Roll video, and another device's video in `Backups/`.
///
/// Only the embedded server: a scaled one sends block bytes from its object store
/// (a redirect the drive follows), which the proxy does not see.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct ReadaheadMountTests {
    typealias Online = OnlineContentTests
    static let KiB = 1 << 10, MiB = 1 << 20
    static let size = 40 * MiB
    /// HTTP headers and chunk lists: a few hundred bytes per request, about 1.2 KB per
    /// block's chunk list.
    static let overhead = 32 * KiB

    /// The patterns, in this order on one cold file, each checked for its bytes and for
    /// what the proxy counted while it ran.
    static func readPatterns(_ path: String, _ video: [UInt8], proxy: LinkProxy, scratch: String) throws {
        func sent(_ what: String, atMost bound: Int, _ body: () throws -> Void) rethrows {
            let before = proxy.bytesFromTarget
            try body()
            let n = proxy.bytesFromTarget - before
            print("\(what): \(n) bytes from the server")
            #expect(n <= bound, "\(what): \(n) bytes from the server, more than \(bound)")
        }
        let start = proxy.bytesFromTarget
        // One pread of 64 KiB in the middle of the file: the chunk it covers.
        let middle = 30 * MiB + 1000
        sent("one 64 KiB pread", atMost: Blocks.chunkSize + overhead) {
            #expect((try? Online.readPart(path, count: 64 << 10, at: Int64(middle)).get()) == Array(video[middle..<(middle + (64 << 10))]))
        }
        // `head` reads 8 KiB at a time: the first chunk, then the window doubling to 1 MiB.
        func head(_ count: Int) throws {
            let out = scratch + "/head.out"
            let r = try runCommand("/bin/sh", ["-c", "head -c \(count) '\(path)' > '\(out)'"])
            #expect(r.status == 0, "\(r.stderr)")
            #expect(try readFile(out) == Array(video[0..<count]), "head -c \(count)")
        }
        try sent("head -c 65536", atMost: Blocks.chunkSize + overhead) { try head(65536) }
        try sent("head -c 1M after head -c 65536", atMost: MiB - Blocks.chunkSize + overhead) { try head(MiB) }
        // A seeking reader: a megabyte in 8 KiB reads at each of three places.
        for offset in [12 * MiB + 256 * KiB, 20 * MiB, 9 * MiB] {
            sent("1 MiB in 8 KiB reads at \(offset)", atMost: MiB + overhead) {
                let fd = open(path, O_RDONLY)
                #expect(fd >= 0)
                defer { close(fd) }
                var buffer = [UInt8](repeating: 0, count: 8192)
                for at in stride(from: offset, to: offset + MiB, by: 8192) {
                    #expect(pread(fd, &buffer, 8192, off_t(at)) == 8192)
                    #expect(buffer[...] == video[at..<(at + 8192)], "at \(at)")
                }
            }
        }
        // The whole file in order: every byte right, each fetched about once in all.
        try sent("the rest of the file in order (cat)", atMost: video.count + overhead) {
            let hash = try sha256(ofFile: path)
            #expect(hash == SHA256Hasher.digest(video).hex)
        }
        let whole = proxy.bytesFromTarget - start
        print("all the patterns: \(whole) bytes from the server")
        #expect(whole < video.count + video.count / 20, "\(whole) bytes for a \(video.count)-byte file")
    }

    @Test func anOnlineOnlyVideoFetchesAboutWhatIsRead() throws {
        let dir = TemporaryDirectory("vdrive-ramp-online"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let proxy = try LinkProxy(targetPort: UInt16(server.port), oneWayDelay: 0, bytesPerSecond: 1e12)
        defer { proxy.stop() }
        let drive = try MountedDrive(label: "vdrive-ramp-online-mount",
                                     arguments: ["--server", "http://127.0.0.1:\(proxy.port)", "--token-file", server.tokenFile, "--camera-backup"],
                                     environment: Online.environment)
        defer { drive.stop() }
        let video = pseudoRandomBytes(Self.size, seed: 78)
        try writeFile(drive.path("Camera Roll/V.mp4"), video)
        try BackupEndToEndTests.waitForBackup(drive, done: 1, seconds: 300)
        try Online.settings(drive, "cache-size", "1K")
        try Online.settings(drive, "optimize-storage", "on")
        try eventually("the video became online-only", within: 30, poll: 0.1) {
            (try? drive.vdrive(["status", "--state", drive.state]).stdout.contains("0 B local")) ?? false
        }
        // Fetched content stays while the patterns run.
        try Online.settings(drive, "cache-size", "10G")
        try Self.readPatterns(drive.path("Camera Roll/V.mp4"), video, proxy: proxy, scratch: dir.path)
    }

    @Test func anotherDevicesVideoInBackupsFetchesAboutWhatIsRead() throws {
        let dir = TemporaryDirectory("vdrive-ramp-backups"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, device: "phone"); defer { server.stop() }
        try server.addDevice("laptop", tokenFile: dir.path + "/laptop.token")
        let proxy = try LinkProxy(targetPort: UInt16(server.port), oneWayDelay: 0, bytesPerSecond: 1e12)
        defer { proxy.stop() }
        let phone = try MountedDrive(label: "vdrive-ramp-phone", arguments: server.mountArguments + ["--camera-backup"])
        defer { phone.stop() }
        let laptop = try MountedDrive(label: "vdrive-ramp-laptop",
                                      arguments: ["--server", "http://127.0.0.1:\(proxy.port)", "--token-file", dir.path + "/laptop.token"])
        defer { laptop.stop() }
        let video = pseudoRandomBytes(Self.size, seed: 79)
        try BackupsEndToEndTests.copyIn(video, dated: BackupsEndToEndTests.july2019, to: phone.path("Camera Roll/V.mp4"), scratch: dir.path)
        try BackupEndToEndTests.waitForBackup(phone, done: 1, seconds: 300)
        let path = laptop.path("Backups/phone/2019/07/V.mp4")
        try eventually("the phone's video in the laptop's Backups/", within: 30, poll: 0.05) { FileManager.default.fileExists(atPath: path) }
        try Self.readPatterns(path, video, proxy: proxy, scratch: dir.path)
    }
}
