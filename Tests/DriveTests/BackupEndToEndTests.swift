import Testing
import Foundation
import Crypto
import Storage
import Backup
import CLinux

/// Tier three: a real `vdrive serve` on loopback and a real mount, end to end.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct BackupEndToEndTests {
    static let photoNames = ["IMG_0001.jpg", "IMG_0002.jpg", "DSC_1999.jpg", "screenshot.png"]

    /// A distinct, valid photo: a fixture with bytes appended after its end marker.
    static func photo(_ i: Int) throws -> [UInt8] {
        let base = try readFile(fixturesPath + "/" + photoNames[i % photoNames.count])
        return base + Array("vdrive-test-photo-\(i)".utf8)
    }

    static func list(_ path: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    /// Waits until nothing is pending or uploading and `done` holds `count` items.
    static func waitForBackup(_ drive: MountedDrive, done count: Int, seconds: Int = 120) throws {
        for _ in 0..<(seconds * 10) {
            if list(drive.path(".backup/pending")).isEmpty && list(drive.path(".backup/uploading")).isEmpty
                && list(drive.path(".backup/done")).count >= count { return }
            usleep(100_000)
        }
        let status = (try? String(contentsOfFile: drive.path(".backup/status"), encoding: .utf8)) ?? "?"
        throw TestFailure("backup did not finish: \(list(drive.path(".backup/pending")).count) pending, \(list(drive.path(".backup/done")).count) done, status: \(status)")
    }

    static func status(_ drive: MountedDrive) -> String {
        (try? String(contentsOfFile: drive.path(".backup/status"), encoding: .utf8)) ?? ""
    }

    /// The status the engine last published (`.backup/status.json`); nil before its first.
    static func engineStatus(_ drive: MountedDrive) -> BackupStatus? {
        FileManager.default.contents(atPath: drive.path(".backup/status.json")).flatMap { try? BackupStatus.decode($0) }
    }

    /// Waits until the engine publishes a status that `holds`. The engine publishes after
    /// each pass over the queue, so a status counting an item shows a pass that saw it:
    /// what a test then finds not sent was held back, not merely not reached yet.
    static func waitForStatus(_ drive: MountedDrive, _ what: String, seconds: Double = 60,
                              _ holds: (BackupStatus) -> Bool) throws {
        try eventually("\(what); the status says: \(status(drive))", within: seconds, poll: 0.05) {
            engineStatus(drive).map(holds) ?? false
        }
    }

    static func xattr(_ path: String, _ name: String) -> String? {
        var buf = [UInt8](repeating: 0, count: 4096)
        let n = vd_getxattr(path, name, &buf, buf.count)
        return n < 0 ? nil : String(decoding: buf[0..<n], as: UTF8.self)
    }

    /// Against the embedded server (blocks in its folder, tus), a scaled one (blocks
    /// in a real SeaweedFS, presigned S3 PUTs verified by the server), and one whose
    /// records are in PostgreSQL (`--database`).
    @Test(arguments: zip([StoreKind.folder, .s3, .folder], ["sqlite", "sqlite", "postgresql"]))
    func twoHundredPhotosAreBackedUpOnceEachWithDatesAndTemporaryNames(store: StoreKind, records: String) throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, store: store, records: records); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-e2e-mount", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }

        var expected = Set<String>()
        let roll = drive.path("Camera Roll")
        try FileManager.default.createDirectory(atPath: roll + "/2024", withIntermediateDirectories: false)
        for i in 0..<200 {
            // Every tenth photo is a byte-identical copy of the one before (dedup).
            let bytes = try Self.photo(i % 10 == 9 ? i - 1 : i)
            expected.insert(ContentHash.of(bytes: bytes).hex)
            let folder = i % 2 == 0 ? roll : roll + "/2024"
            let name = "P\(i).jpg"
            if i % 7 == 0 {
                // Written under a temporary name, then renamed into place (file managers, rsync).
                try writeFile(folder + "/.\(name).part", bytes)
                #expect(rename(folder + "/.\(name).part", folder + "/" + name) == 0)
            } else {
                try writeFile(folder + "/" + name, bytes)
            }
            if i % 5 == 0 {
                // An old photo arriving late (cp -p from an old card, touch -d 2001-01-01).
                var times = [timespec(tv_sec: 978_307_200, tv_nsec: 0), timespec(tv_sec: 978_307_200, tv_nsec: 0)]
                utimensat(AT_FDCWD, folder + "/" + name, &times, 0)
            }
        }
        try Self.waitForBackup(drive, done: 200)
        #expect(server.contentHashes() == expected, "the server holds exactly the unique contents")
        #expect(server.blockCount() == expected.count, "each photo is one block, stored once")
        if store == .s3 { #expect(server.blockFileCount() + server.packedBlockCount() == 0, "a scaled server keeps no block on its disk") }
        let done = Self.list(drive.path(".backup/done"))
        #expect(done.count == 200)
        #expect(!done.contains { $0.hasPrefix(".") || $0.hasSuffix(".part") }, "temporary names are never backed up")
        #expect(Self.list(drive.path(".backup/failed")).isEmpty)
        #expect(Self.xattr(roll + "/P10.jpg", "user.vdrive.backup") == "done")
        #expect(Self.xattr(roll + "/P10.jpg", "user.vdrive.content-hash") == ContentHash.of(bytes: try Self.photo(10)).hex)
        #expect(Self.status(drive).hasPrefix("Up to date · \(expected.count) photos and videos, "), "status: \(Self.status(drive))")
        let description = try String(contentsOfFile: drive.path(".backup/done/P0.jpg"), encoding: .utf8)
        #expect(description.contains("captured: 2026-11-28T09:15:02"), "EXIF capture date of IMG_0001.jpg: \(description)")

        // Renames and moves inside the drive never send anything again.
        let before = server.bytesWritten()
        #expect(rename(roll + "/P2.jpg", roll + "/2024/P2-renamed.jpg") == 0)
        #expect(rename(roll + "/P4.jpg", drive.path("moved-out.jpg")) == 0)
        try FileManager.default.removeItem(atPath: roll + "/P6.jpg")
        try Self.waitForBackup(drive, done: 201)
        #expect(server.bytesWritten() - before < 64 * 1024, "a rename records a path, it sends no photo bytes")
        #expect(server.contentHashes() == expected, "deleting or moving a photo never deletes its backup")

        // An edit backs up the new version; the old one stays on the server.
        let edited = try Self.photo(1000)
        try writeFile(roll + "/P8.jpg", edited)
        try Self.waitForBackup(drive, done: 202)
        #expect(server.contentHashes() == expected.union([ContentHash.of(bytes: edited).hex]))
    }

    /// Against both records back ends: SQLite in the data folder, and PostgreSQL (`--database`).
    @Test(arguments: ["sqlite", "postgresql"]) func killDuringALargeUploadResumesMidFile(_ records: String) throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, records: records); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-e2e-kill", arguments: server.mountArguments + ["--camera-backup"], start: false)
        defer { drive.stop() }
        // Paused while the file is copied in, so the kill lands mid-upload and not after it.
        #expect(try drive.vdrive(["pause"]).status == 0)
        try drive.startForeground()
        let size = 500 << 20
        let bytes = pseudoRandomBytes(size, seed: 77)
        try writeFile(drive.path("Camera Roll/video.mov"), bytes)
        let written0 = server.bytesWritten()
        #expect(try drive.vdrive(["resume"]).status == 0)
        // Wait until part of the file is on the server, then SIGKILL the mount.
        var sentBeforeKill: Int64 = 0
        for _ in 0..<3000 {
            sentBeforeKill = server.bytesWritten() - written0
            if sentBeforeKill > 40 << 20 { break }
            usleep(2_000)
        }
        drive.kill9()
        try #require(sentBeforeKill > 0 && sentBeforeKill < Int64(size), "the kill must land mid-upload (sent \(sentBeforeKill))")
        try drive.start()
        try Self.waitForBackup(drive, done: 1, seconds: 300)
        let total = server.bytesWritten() - written0
        let resent = total - Int64(size)
        print("kill mid-upload: \(sentBeforeKill >> 20) MiB on the server at the kill; re-sent \(resent) bytes after the restart")
        // A block's PATCH carries its checksum, so a PATCH cut by the kill keeps none of its
        // bytes: each of the blocks in flight at the kill may be sent again, no more. The
        // server's `wchar` also counts what it writes besides the bytes: its records' WAL
        // frames, access log lines and answers for the ~115 blocks after the restart, 1.3
        // MB in a run where all four blocks in flight were sent again (a 1 MiB allowance
        // failed it); 4 MiB, still less than one block more.
        let inFlight = Int64(UploaderConfiguration().blocksInFlight)
        #expect(resent <= inFlight * Int64(Blocks.size) + (4 << 20) - 1, "re-sent at most the \(inFlight) blocks in flight plus metadata, got \(resent)")
        #expect(server.contentHashes() == [ContentHash.of(bytes: bytes).hex])
    }

    /// An importer that forks mid-write: a writer whose children close inherited descriptors commits five
    /// partial versions; only the settled one (no writable handle left) is sent, once.
    @Test func aPhotoWrittenByChildProcessesIsSentOnceWhenSettled() throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-e2e-settle", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }
        let written0 = server.bytesWritten()
        let script = """
            exec 3> "$1"
            for i in 1 2 3 4 5; do head -c 2000000 /dev/urandom >&3; sleep 0.4; done
            exec 3>&-
            """
        let result = try runCommand("/bin/sh", ["-c", script, "sh", drive.path("Camera Roll/partial.jpg")])
        #expect(result.status == 0, "\(result.stderr)")
        try Self.waitForBackup(drive, done: 1)
        let bytes = try readFile(drive.path("Camera Roll/partial.jpg"))
        #expect(bytes.count == 10_000_000)
        #expect(server.contentHashes() == [ContentHash.of(bytes: bytes).hex], "only the settled version reaches the server")
        let sent = server.bytesWritten() - written0
        #expect(sent < 10_000_000 + (1 << 20), "10 MB sent once, not 30 MB in five partial versions (sent \(sent))")
        #expect(Self.list(drive.path(".backup/done")) == ["partial.jpg"])
    }

    /// Blocks make a small change cheap to back up: a 4 KiB change in a big backed-up file sends only the block it touched.
    @Test func aChangedBigFileSendsOnlyItsChangedBlock() throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-e2e-change", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }
        var bytes = pseudoRandomBytes(200 << 20, seed: 91)
        try writeFile(drive.path("Camera Roll/clip.mov"), bytes)
        try Self.waitForBackup(drive, done: 1, seconds: 300)
        let before = server.bytesWritten()
        let patch = [UInt8](repeating: 0x5A, count: 4096)
        let fd = open(drive.path("Camera Roll/clip.mov"), O_WRONLY)
        try #require(fd >= 0, "open clip.mov: errno \(errno)")
        let offset = (100 << 20) + 12_345
        _ = patch.withUnsafeBytes { pwrite(fd, $0.baseAddress, 4096, off_t(offset)) }
        close(fd)
        bytes.replaceSubrange(offset..<(offset + 4096), with: patch)
        try Self.waitForBackup(drive, done: 2, seconds: 300)
        let sent = server.bytesWritten() - before
        print("a 4 KiB change in a 200 MiB file sent \(sent) bytes")
        #expect(sent <= Int64(8 << 20), "one 4 MiB block and metadata, not the file (sent \(sent))")
        #expect(server.contentHashes().contains(ContentHash.of(bytes: bytes).hex))
        #expect(server.contentHashes().count == 2, "the old version stays on the server")
    }

    @Test func pauseHoldsEveryByteAndResumeSends() throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-e2e-pause", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }
        #expect(try drive.vdrive(["pause"]).status == 0)
        // The engine takes the pause (it watches the settings file) before the photo comes.
        try Self.waitForStatus(drive, "the engine says it is paused") { $0.waitingCode == "paused" }
        try writeFile(drive.path("Camera Roll/a.jpg"), try Self.photo(1))
        try Self.waitForStatus(drive, "the engine holds a.jpg while paused") { $0.waitingCode == "paused" && $0.itemsLeft == 1 }
        #expect(Self.status(drive).hasPrefix("Paused"), "status: \(Self.status(drive))")
        #expect(Self.list(drive.path(".backup/pending")) == ["a.jpg"])
        #expect(server.contentHashes().isEmpty, "no byte is sent while paused")
        #expect(try drive.vdrive(["resume"]).status == 0)
        try Self.waitForBackup(drive, done: 1)
        #expect(server.contentHashes().count == 1)
    }

    /// A fake system root: a battery at 15% discharging, and a default route over a
    /// USB-tethered phone (rndis_host).
    static func fakeSystem(_ root: String, batteryPercent: Int, charging: Bool, tethered: Bool) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: root + "/sys/class/power_supply/BAT0", withIntermediateDirectories: true)
        try "Battery\n".write(toFile: root + "/sys/class/power_supply/BAT0/type", atomically: true, encoding: .utf8)
        try "\(batteryPercent)\n".write(toFile: root + "/sys/class/power_supply/BAT0/capacity", atomically: true, encoding: .utf8)
        try (charging ? "Charging\n" : "Discharging\n").write(toFile: root + "/sys/class/power_supply/BAT0/status", atomically: true, encoding: .utf8)
        try fm.createDirectory(atPath: root + "/proc/net", withIntermediateDirectories: true)
        let iface = tethered ? "usb0" : "eth0"
        try "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\(iface)\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
            .write(toFile: root + "/proc/net/route", atomically: true, encoding: .utf8)
        try fm.createDirectory(atPath: root + "/sys/class/net/\(iface)/device", withIntermediateDirectories: true)
        try (tethered ? "DRIVER=rndis_host\n" : "DRIVER=e1000\n").write(toFile: root + "/sys/class/net/\(iface)/device/uevent", atomically: true, encoding: .utf8)
    }

    @Test(arguments: [
        ("metered", 80, true, true, "Waiting for an unmetered network"),
        ("battery", 15, false, false, "Battery low (15%)"),
    ])
    func policiesHoldBackupAndSayWhy(name: String, battery: Int, charging: Bool, tethered: Bool, reason: String) throws {
        let dir = TemporaryDirectory("vdrive-e2e-\(name)"); defer { dir.remove() }
        try Self.fakeSystem(dir.path + "/system", batteryPercent: battery, charging: charging, tethered: tethered)
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        // An empty PATH entry first: no nmcli, so the fake sysfs decides.
        let drive = try MountedDrive(label: "vdrive-e2e-policy", arguments: server.mountArguments + ["--camera-backup"],
                                     environment: ["VDRIVE_SYSTEM_ROOT": dir.path + "/system", "PATH": "/nonexistent"])
        defer { drive.stop() }
        try writeFile(drive.path("Camera Roll/held.jpg"), try Self.photo(2))
        try Self.waitForStatus(drive, "the engine holds held.jpg: \(reason)") {
            $0.waitingReason?.hasPrefix(reason) == true && $0.itemsLeft == 1
        }
        #expect(Self.status(drive).hasPrefix(reason), "status: \(Self.status(drive))")
        #expect(server.contentHashes().isEmpty, "no byte is sent while a policy holds backup")
        // The user lifts the hold from the settings; backup proceeds at once.
        let lift = name == "metered" ? ["settings", "allow-metered", "on"] : ["settings", "battery-threshold", "10"]
        let r = try drive.vdrive(lift)
        #expect(r.status == 0, "\(r.stderr)")
        try Self.waitForBackup(drive, done: 1)
        #expect(server.contentHashes().count == 1)
    }

    @Test func serverDownThenUpAndMountWorksMeanwhile() throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        // Start the server once for a port and a token, then stop it: the drive mounts against a dead address.
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        server.stop()
        let drive = try MountedDrive(label: "vdrive-e2e-down", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }
        try writeFile(drive.path("Camera Roll/while-down.jpg"), try Self.photo(3))
        #expect(try readFile(drive.path("Camera Roll/while-down.jpg")) == (try Self.photo(3)), "the drive works without its server")
        // The engine has tried to send it, failed, and waits to retry.
        try Self.waitForStatus(drive, "the engine retries while-down.jpg after an error") {
            $0.waitingCode == "retrying" && $0.itemsLeft == 1
        }
        #expect(Self.list(drive.path(".backup/pending")) == ["while-down.jpg"])
        #expect(!Self.status(drive).hasPrefix("Up to date"), "status: \(Self.status(drive))")
        // The server comes back on the same port: the retry with capped backoff finds it.
        try server.start()
        try Self.waitForBackup(drive, done: 1, seconds: 240)
    }

    @Test func aNewDeviceLearnsFromTheServerAndSendsNothingTwice() throws {
        let dir = TemporaryDirectory("vdrive-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        do {
            let laptop = try MountedDrive(label: "vdrive-e2e-laptop", arguments: server.mountArguments + ["--camera-backup"])
            defer { laptop.stop() }
            for i in 0..<20 { try writeFile(laptop.path("Camera Roll/p\(i).jpg"), try Self.photo(i)) }
            try Self.waitForBackup(laptop, done: 20)
        }
        // A reinstall: empty local state, same server. The same photos copied in again send zero bytes.
        try server.addDevice("reinstalled", tokenFile: dir.path + "/token2")
        let fresh = try MountedDrive(label: "vdrive-e2e-fresh", arguments: ["--server", server.url, "--token-file", dir.path + "/token2", "--camera-backup"])
        defer { fresh.stop() }
        let before = server.bytesWritten()
        for i in 0..<20 { try writeFile(fresh.path("Camera Roll/p\(i).jpg"), try Self.photo(i)) }
        try Self.waitForBackup(fresh, done: 20)
        let sent = server.bytesWritten() - before
        // The 20 photos are about 1 MB; what the server writes for 20 records (WAL pages of
        // the versions, the feed, their indexes) is a dozen KB each. Each item saying
        // "linked" below is the exact check.
        #expect(sent < 512 * 1024, "photo bytes were sent again: \(sent) bytes written by the server")
        let linked = try Self.list(fresh.path(".backup/done")).filter {
            try String(contentsOfFile: fresh.path(".backup/done/" + $0), encoding: .utf8).contains("linked")
        }
        #expect(linked.count == 20)
        #expect(server.contentHashes().count == 20)
    }
}

