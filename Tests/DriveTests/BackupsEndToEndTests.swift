import Testing
import Foundation
import Crypto
import Storage

/// Tier three: `Backups/` across devices. One real `vdrive serve`, real mounts each with
/// its own state folder, config and token.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct BackupsEndToEndTests {
    typealias E2E = BackupEndToEndTests

    static let july2019: Int64 = 1_563_000_000       // 2019-07-13 06:40 UTC
    /// The fixtures' EXIF DateTimeOriginal (a camera's clock, read as UTC).
    static let exifIMG0001 = utc(2026, 11, 28, 9, 15, 2)
    static let exifDSC1999 = utc(2015, 3, 1, 12, 0, 0)

    static func utc(_ year: Int32, _ month: Int32, _ day: Int32, _ hour: Int32, _ minute: Int32, _ second: Int32) -> Int64 {
        var t = tm()
        t.tm_year = year - 1900; t.tm_mon = month - 1; t.tm_mday = day
        t.tm_hour = hour; t.tm_min = minute; t.tm_sec = second
        return Int64(timegm(&t))
    }

    static func fixture(_ name: String, plus tag: String) throws -> [UInt8] {
        try readFile(fixturesPath + "/" + name) + Array(tag.utf8)
    }

    /// A file copied in with `cp -p` from a file dated `mtime`: content and date in one commit.
    static func copyIn(_ bytes: [UInt8], dated mtime: Int64, to path: String, scratch: String) throws {
        let source = scratch + "/" + UUID().uuidString
        try writeFile(source, bytes)
        var times = [timespec(tv_sec: Int(mtime), tv_nsec: 0), timespec(tv_sec: Int(mtime), tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, source, &times, 0) == 0)
        let r = try runCommand("/bin/cp", ["-p", source, path])
        #expect(r.status == 0, "\(r.stderr)")
    }

    static func mtime(_ path: String) -> Int64? {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_mtim.tv_sec) : nil
    }

    static func sha(_ bytes: [UInt8]) -> String { SHA256Hasher.digest(bytes).hex }

    /// Every regular file under `root`, relative path → (SHA-256 of its bytes, mtime).
    static func tree(_ root: String) throws -> [String: (sha: String, mtime: Int64)] {
        var out: [String: (String, Int64)] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return [:] }
        while let relative = walker.nextObject() as? String {
            let path = root + "/" + relative
            var st = stat()
            guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            out[relative] = (try sha256(ofFile: path), Int64(st.st_mtim.tv_sec))
        }
        return out
    }

    /// Every path under `root` (folders and files), for comparing listings.
    static func names(_ root: String) -> [String] {
        ((FileManager.default.enumerator(atPath: root)?.allObjects as? [String]) ?? []).sorted()
    }

    /// On both back ends; on the scaled one the phone backs up through one server process
    /// and the laptop and the new device read through the other, from the store.
    @Test(arguments: Backend.allCases)
    func twoDevicesSeeEveryBackupByDeviceAndDateAndANewDeviceCopiesThem(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-backups"); defer { dir.remove() }
        let scratch = dir.path + "/scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let server = try LocalServer(folder: dir.path, device: "phone", backend: backend); defer { server.stop() }
        try server.addDevice("laptop", tokenFile: dir.path + "/laptop.token")
        try server.addDevice("new-laptop", tokenFile: dir.path + "/new.token")
        let phone = try MountedDrive(label: "vdrive-backups-phone", arguments: server.mountArguments + ["--camera-backup"])
        defer { phone.stop() }
        let laptop = try MountedDrive(label: "vdrive-backups-laptop",
                                      arguments: server.mountArguments(tokenFile: dir.path + "/laptop.token", process: 1) + ["--camera-backup"])
        defer { laptop.stop() }

        // Different photos under the same name on both devices, one photo both have, a
        // picture without EXIF and a 9 MiB video dated by their mtime.
        let phone1 = try Self.fixture("IMG_0001.jpg", plus: "phone-1"), laptop1 = try Self.fixture("IMG_0001.jpg", plus: "laptop-1")
        let shared = try readFile(fixturesPath + "/DSC_1999.jpg")
        let screenshot = try readFile(fixturesPath + "/screenshot.png")
        let clip = pseudoRandomBytes(9 << 20, seed: 2019)
        try writeFile(phone.path("Camera Roll/IMG_0001.jpg"), phone1)
        try writeFile(phone.path("Camera Roll/DSC_1999.jpg"), shared)
        try Self.copyIn(screenshot, dated: Self.july2019, to: phone.path("Camera Roll/screenshot.png"), scratch: scratch)
        try Self.copyIn(clip, dated: Self.july2019, to: phone.path("Camera Roll/clip.mov"), scratch: scratch)
        try writeFile(laptop.path("Camera Roll/IMG_0001.jpg"), laptop1)
        try writeFile(laptop.path("Camera Roll/DSC_1999.jpg"), shared)
        try E2E.waitForBackup(phone, done: 4)
        try E2E.waitForBackup(laptop, done: 2)
        // A second IMG_0001.jpg of the phone in the same month (another folder on the
        // phone), then a new version of the first.
        let trip = try Self.fixture("IMG_0001.jpg", plus: "phone-trip"), phone2 = try Self.fixture("IMG_0001.jpg", plus: "phone-2")
        try FileManager.default.createDirectory(atPath: phone.path("Camera Roll/Trip"), withIntermediateDirectories: false)
        try writeFile(phone.path("Camera Roll/Trip/IMG_0001.jpg"), trip)
        try E2E.waitForBackup(phone, done: 5)
        try writeFile(phone.path("Camera Roll/IMG_0001.jpg"), phone2)
        try E2E.waitForBackup(phone, done: 6)
        // Dedup: the shared photo in a second file of the phone, then deleted and saved
        // again under its name (one content, one block, three records).
        try writeFile(phone.path("Camera Roll/DSC_1999 copy.jpg"), shared)
        try E2E.waitForBackup(phone, done: 7)
        try FileManager.default.removeItem(atPath: phone.path("Camera Roll/DSC_1999.jpg"))
        try writeFile(phone.path("Camera Roll/DSC_1999.jpg"), shared)
        try E2E.waitForBackup(phone, done: 8)

        let expected: [String: (sha: String, mtime: Int64)] = [
            "laptop/2026/11/IMG_0001.jpg": (Self.sha(laptop1), Self.exifIMG0001),
            "laptop/2015/03/DSC_1999.jpg": (Self.sha(shared), Self.exifDSC1999),
            "phone/2026/11/IMG_0001.jpg": (Self.sha(phone2), Self.exifIMG0001),
            "phone/2026/11/IMG_0001 (2).jpg": (Self.sha(trip), Self.exifIMG0001),
            "phone/2015/03/DSC_1999.jpg": (Self.sha(shared), Self.exifDSC1999),
            "phone/2015/03/DSC_1999 copy.jpg": (Self.sha(shared), Self.exifDSC1999),
            "phone/2019/07/screenshot.png": (Self.sha(screenshot), Self.july2019),
            "phone/2019/07/clip.mov": (Self.sha(clip), Self.july2019),
        ]
        for drive in [phone, laptop] {
            let backups = drive.path("Backups")
            try eventually("every record in \(backups)", within: 15) {
                expected.keys.allSatisfy { FileManager.default.fileExists(atPath: backups + "/" + $0) }
                    && Self.names(backups + "/phone/2026/11/.versions").count == 1
            }
            // Listing: sizes and dates with nothing fetched yet (st_blocks counts what is here).
            var st = stat()
            #expect(stat(backups + "/phone/2019/07/clip.mov", &st) == 0 && st.st_size == 9 << 20 && Int64(st.st_mtim.tv_sec) == Self.july2019)
            let files = try Self.tree(backups)
            let older = try #require(files.keys.first { $0.hasPrefix("phone/2026/11/.versions/IMG_0001 (") && $0.hasSuffix(").jpg") })
            #expect(files[older]?.sha == Self.sha(phone1) && files[older]?.mtime == Self.exifIMG0001, "the older version of IMG_0001.jpg")
            #expect(Set(files.keys) == Set(expected.keys).union([older]), "\(drive.mountPoint): \(files.keys.sorted())")
            for (path, want) in expected {
                #expect(files[path]?.sha == want.sha, "\(drive.mountPoint)/Backups/\(path): content")
                #expect(files[path]?.mtime == want.mtime, "\(drive.mountPoint)/Backups/\(path): mtime \(files[path]?.mtime ?? -1), capture date \(want.mtime)")
            }
        }
        // Both drives know which workspace their records came from (a drive pointed at
        // another one later learns its records from the start: RecordsFollower).
        let workspace = try #require(server.workspaceID())
        for drive in [phone, laptop] {
            let known = try Database(path: drive.state + "/catalog.sqlite").queryOne("SELECT workspace FROM remote_feed") { $0.string(0) }
            #expect(known == workspace, "\(drive.mountPoint): \(String(describing: known)), the server's \(workspace)")
        }
        // Nothing is stored twice on the server: each content once, each block once.
        let contents = [phone1, laptop1, shared, screenshot, clip, trip, phone2]
        #expect(server.contentHashes() == Set(contents.map { ContentHash.of(bytes: $0).hex }))
        let blocks = Set(contents.flatMap { bytes -> [SHA256Digest] in
            let h = ContentHasher()
            bytes.withUnsafeBytes { h.update($0) }
            return h.finish().blocks
        })
        #expect(server.blockCount() == blocks.count, "\(server.blockCount()) block files for \(blocks.count) distinct blocks")

        // Freshness: from the moment the server holds the phone's record of a photo to
        // the moment the laptop's Backups/ shows it.
        var latencies: [Double] = []
        for i in 0..<5 {
            let name = "late-\(i).jpg"
            // At a random moment of the laptop's feed interval (else every sample would
            // land at the same phase of it).
            usleep(UInt32.random(in: 0..<1_000_000))
            try writeFile(phone.path("Camera Roll/" + name), try Self.fixture("IMG_0002.jpg", plus: name))
            try eventually("\(name) recorded on the server", within: 60) { server.hasRecord("Camera Roll/" + name) }
            let recorded = Date()
            try eventually("\(name) in the laptop's Backups/", within: 30) {
                FileManager.default.fileExists(atPath: laptop.path("Backups/phone/2026/11/" + name))
            }
            latencies.append(Date().timeIntervalSince(recorded))
        }
        let sorted = latencies.sorted()
        print("Backups/ freshness: a record made on the phone appeared in the laptop's Backups/ after "
              + latencies.map { String(format: "%.0f ms", $0 * 1000) }.joined(separator: ", ")
              + String(format: " (min %.0f, median %.0f, max %.0f ms; told by the held tree request)", sorted[0] * 1000, sorted[sorted.count / 2] * 1000, sorted[sorted.count - 1] * 1000))

        // The administrator deletes a backup: it leaves the laptop's Backups/ too.
        let deleted = try runCommand(vdriveBinary, ["serve", "backup", "delete", "phone", "Camera Roll/late-0.jpg", "--yes", "--data", server.data] + server.databaseArguments)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        try eventually("the deleted backup gone from the laptop's Backups/", within: 30) {
            !Self.names(laptop.path("Backups/phone/2026/11")).contains("late-0.jpg")
        }

        // A third, new device restores the phone's backups with cp -a.
        let fresh = try MountedDrive(label: "vdrive-backups-new", arguments: server.mountArguments(tokenFile: dir.path + "/new.token", process: 1))
        defer { fresh.stop() }
        try eventually("the phone's records on the new device", within: 15) {
            FileManager.default.fileExists(atPath: fresh.path("Backups/phone/2019/07/clip.mov"))
        }
        // A program that maps the file (an image viewer, a player) reads the same bytes,
        // also before anything of it is held here (opened past the page cache).
        let mapped = open(fresh.path("Backups/phone/2015/03/DSC_1999.jpg"), O_RDONLY)
        let map = mmap(nil, shared.count, PROT_READ, MAP_SHARED, mapped, 0)
        #expect(map != MAP_FAILED, "mmap of a Backups/ file: errno \(errno)")
        if let map, map != MAP_FAILED {
            #expect(Array(UnsafeRawBufferPointer(start: map, count: shared.count)) == shared)
            munmap(map, shared.count)
        }
        close(mapped)
        let restored = dir.path + "/restored"
        let copy = try runCommand("/bin/cp", ["-a", fresh.path("Backups/phone"), restored])
        #expect(copy.status == 0, "cp -a: \(copy.stderr)")
        let copied = try Self.tree(restored)
        for (path, want) in expected where path.hasPrefix("phone/") {
            let inside = String(path.dropFirst("phone/".count))
            #expect(copied[inside]?.sha == want.sha, "restored \(inside): content")
            #expect(copied[inside]?.mtime == want.mtime, "restored \(inside): capture date as mtime")
        }
        #expect(copied.keys.contains { $0.hasPrefix("2026/11/.versions/IMG_0001 (") }, "cp -a copies the older versions too")
        // The attributes a backed-up Camera Roll file shows: its content hash, and done.
        let viewed = fresh.path("Backups/phone/2015/03/DSC_1999.jpg")
        #expect(BackupEndToEndTests.xattr(viewed, "user.vdrive.content-hash") == ContentHash.of(bytes: shared).hex)
        #expect(BackupEndToEndTests.xattr(viewed, "user.vdrive.backup") == "done")
        #expect(BackupEndToEndTests.xattr(fresh.path("Backups/phone/2015"), "user.vdrive.backup") == nil, "folders have none")

        // Backups/ is read-only: every change fails with EROFS, as on a read-only mount.
        let file = laptop.path("Backups/phone/2015/03/DSC_1999.jpg")
        func failsWithEROFS(_ what: String, _ result: Int32) {
            let e = errno
            #expect(result == -1 && e == EROFS, "\(what): \(result) errno \(e)")
        }
        failsWithEROFS("open for writing", open(file, O_WRONLY))
        failsWithEROFS("create", open(laptop.path("Backups/phone/2015/03/new.jpg"), O_WRONLY | O_CREAT, 0o644))
        failsWithEROFS("unlink", unlink(file))
        failsWithEROFS("rename out", rename(file, laptop.path("moved.jpg")))
        failsWithEROFS("mkdir", mkdir(laptop.path("Backups/phone/x"), 0o755))
        failsWithEROFS("chmod", chmod(file, 0o644))
        #expect(try sha256(ofFile: file) == Self.sha(shared), "the file is unchanged")

        // Without a mount, the sync task learns the records (a systemd timer's run).
        try laptop.unmount()
        try writeFile(phone.path("Camera Roll/by-task.jpg"), try Self.fixture("IMG_0002.jpg", plus: "by-task"))
        try eventually("by-task.jpg recorded on the server", within: 60) { server.hasRecord("Camera Roll/by-task.jpg") }
        let task = try laptop.vdrive(["task", "run", "us.virtualdrive.sync", "--state", laptop.state] + laptop.mountArguments.filter { $0 != "--camera-backup" })
        #expect(task.status == 0, "sync task: \(task.stderr)")
        #expect(task.stdout.contains("Backups: "), "\(task.stdout)")

        // The server down: the laptop lists from the records kept in its catalog.
        server.stop()
        try laptop.start()
        let listed = Self.names(laptop.path("Backups"))
        #expect(listed.contains("phone/2026/11/by-task.jpg"), "learned by the task, listed with the server down")
        #expect(listed.contains("phone/2019/07/clip.mov") && !listed.contains("phone/2026/11/late-0.jpg"))
        var st = stat()
        #expect(stat(laptop.path("Backups/phone/2019/07/clip.mov"), &st) == 0 && st.st_size == 9 << 20)
        // A file never read here cannot be read without the server: EIO, not a hang.
        let started = Date()
        let fd = open(laptop.path("Backups/phone/2026/11/by-task.jpg"), O_RDONLY)
        #expect(fd >= 0, "opening reads nothing")
        var byte: UInt8 = 0
        let n = read(fd, &byte, 1)
        let e = errno
        close(fd)
        #expect(n == -1 && e == EIO, "read with the server down: \(n), errno \(e)")
        print(String(format: "Backups/ read with the server down failed (EIO) after %.0f ms", Date().timeIntervalSince(started) * 1000))
        // Files read before are in the block cache: they still read.
        #expect(try sha256(ofFile: laptop.path("Backups/phone/2019/07/clip.mov")) == Self.sha(clip))
    }
}
