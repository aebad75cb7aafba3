import Testing
import Foundation
import Crypto
import Storage
import CLinux
import TestSupport

/// Tier three: blocks the drive does not hold, through real mounts and a real
/// `vdrive serve`: optimize storage, the cache bound, pins, pending items, self-heal,
/// the server going away and coming back, and how little a partial read transfers.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct OnlineContentTests {
    /// The cache bound is applied every second in these tests (10 s in use).
    /// Each pass logged (`cache bound pass N done`), so a test can wait for passes.
    static let environment = ["VDRIVE_CACHE_CHECK_SECONDS": "1", "VDRIVE_CACHE_PASS_LOG": "1"]

    static func blockFile(_ drive: MountedDrive, _ bytes: [UInt8]) -> String {
        let d = SHA256Hasher.digest(bytes)
        return drive.state + "/blobs/\(d.hex.prefix(2))/\(d.hex)"
    }

    static func settings(_ drive: MountedDrive, _ key: String, _ value: String) throws {
        let r = try drive.vdrive(["settings", key, value])
        guard r.status == 0 else { throw TestFailure("settings \(key) \(value): \(r.stderr)") }
    }

    static func log(_ drive: MountedDrive) -> String {
        (try? String(contentsOfFile: drive.state + "/vdrive.log", encoding: .utf8)) ?? ""
    }

    /// Passes of the cache bound the mount has finished, from its log.
    static func boundPasses(_ drive: MountedDrive) -> Int {
        log(drive).split(separator: "\n").reversed().lazy.compactMap { line -> Int? in
            guard let range = line.range(of: "cache bound pass ") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }.first ?? 0
    }

    /// A server and a mount with camera backup on, stopped on every path.
    static func withServerAndDrive(_ label: String, backend: Backend = .embedded, foreground: Bool = false,
                                   _ body: (LocalServer, MountedDrive) throws -> Void) throws {
        let dir = TemporaryDirectory(label); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, backend: backend); defer { server.stop() }
        let drive = try MountedDrive(label: label + "-mount", arguments: server.mountArguments + ["--camera-backup"],
                                     environment: environment, start: !foreground)
        defer { drive.stop() }
        if foreground { try drive.startForeground() }
        try body(server, drive)
    }

    /// Reads `count` bytes at `offset` with one open: the errno on failure.
    static func readPart(_ path: String, count: Int, at offset: Int64) -> Result<[UInt8], Errno> {
        let fd = open(path, O_RDONLY)
        if fd < 0 { return .failure(Errno.current) }
        defer { close(fd) }
        var out = [UInt8](repeating: 0, count: count)
        let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        if n < 0 { return .failure(Errno.current) }
        return .success(Array(out[0..<n]))
    }

    /// On both back ends (the scaled one sends every block read to its store). With
    /// dedup: one content in two files, and a photo deleted and saved again.
    @Test(arguments: Backend.allCases)
    func optimizeStorageMakesDoneUnpinnedPhotosOnlineOnlyAndReadsBringThemBack(_ backend: Backend) throws {
        try Self.withServerAndDrive("vdrive-online", backend: backend) { server, drive in
            let photos = try (0..<3).map { try BackupEndToEndTests.photo(20 + $0) }
            var files = ["P0 copy.jpg": photos[0]]
            for (i, p) in photos.enumerated() { files["P\(i).jpg"] = p }
            // A video of several blocks: read in part, then in order (whole blocks, prefetch).
            let video = pseudoRandomBytes(3 * Blocks.size + 123_457, seed: 23)
            files["V.mov"] = video
            for (name, bytes) in files { try writeFile(drive.path("Camera Roll/" + name), bytes) }
            let pinned = drive.path("Camera Roll/P2.jpg")
            #expect(vd_setxattr(pinned, "user.vdrive.pin", "1", 1, 0) == 0)
            try BackupEndToEndTests.waitForBackup(drive, done: files.count)
            try FileManager.default.removeItem(atPath: drive.path("Camera Roll/P1.jpg"))
            try writeFile(drive.path("Camera Roll/P1.jpg"), photos[1])
            try BackupEndToEndTests.waitForBackup(drive, done: files.count + 1)
            var before: [String: [FileAttributeKey: Any]] = [:]
            for name in files.keys { before[name] = try FileManager.default.attributesOfItem(atPath: drive.path("Camera Roll/" + name)) }

            try Self.settings(drive, "cache-size", "1K")
            try Self.settings(drive, "optimize-storage", "on")
            try eventually("done, unpinned photos become online-only", within: 20) {
                !FileManager.default.fileExists(atPath: Self.blockFile(drive, photos[0]))
                    && !FileManager.default.fileExists(atPath: Self.blockFile(drive, photos[1]))
                    && !FileManager.default.fileExists(atPath: Self.blockFile(drive, Array(video[0..<Blocks.size])))
            }
            // du counts what is on this disk: an online-only photo takes none (the kernel's
            // cached attributes expire first), a pinned one all of it.
            func blocks(_ name: String) -> Int { var st = stat(); return stat(drive.path("Camera Roll/" + name), &st) == 0 ? Int(st.st_blocks) : -1 }
            try eventually("st_blocks of an online-only photo is 0 (now \(blocks("P0.jpg")))", within: 5) { blocks("P0.jpg") == 0 }
            #expect(blocks("P2.jpg") > 0)
            #expect(FileManager.default.fileExists(atPath: Self.blockFile(drive, photos[2])), "a pinned photo stays")
            let status = try drive.vdrive(["status", "--state", drive.state]).stdout
            #expect(status.contains("online only") && !status.contains("0 B online only"), "status: \(status)")

            // Part of a block first (verified chunks), then every file whole.
            let offset = 2 * Blocks.size + 300_000
            let part = Self.readPart(drive.path("Camera Roll/V.mov"), count: 64 << 10, at: Int64(offset))
            #expect((try? part.get()) == Array(video[offset..<(offset + (64 << 10))]), "a part of an online-only video: \(part)")
            for (name, bytes) in files.sorted(by: { $0.key < $1.key }) {
                let path = drive.path("Camera Roll/" + name)
                let now = try FileManager.default.attributesOfItem(atPath: path)
                #expect(now[.size] as? Int == before[name]?[.size] as? Int)
                #expect(now[.modificationDate] as? Date == before[name]?[.modificationDate] as? Date)
                #expect(BackupEndToEndTests.xattr(path, "user.vdrive.backup") == "done")
                #expect((try? readFile(path)) == bytes, "\(name) read back byte-equal")
            }
            #expect(BackupEndToEndTests.xattr(pinned, "user.vdrive.pin") == "1")
            #expect(!Self.log(drive).contains("the read fails"), "\(Self.log(drive).suffix(1000))")
        }
    }

    /// Backs up one photo, then replaces the server's data folder with a copy taken
    /// before that backup (a server restored from an older copy) and restarts it at the
    /// same address. Returns the photo and its content hash.
    static func backUpThenRestoreServerFromBefore(_ server: LocalServer, _ drive: MountedDrive, seed: Int) throws -> ([UInt8], String) {
        let older = server.data + ".older"
        server.stopServer()
        let copy = try runCommand("/bin/cp", ["-a", server.data, older])
        guard copy.status == 0 else { throw TestFailure("cp -a: \(copy.stderr)") }
        try server.start()

        let photo = try BackupEndToEndTests.photo(seed)
        let content = ContentHash.of(bytes: photo).hex
        try writeFile(drive.path("Camera Roll/R.jpg"), photo)
        try BackupEndToEndTests.waitForBackup(drive, done: 1)
        #expect(server.contentHashes().contains(content))

        server.stopServer()
        try FileManager.default.removeItem(atPath: server.data)
        try FileManager.default.moveItem(atPath: older, toPath: server.data)
        try server.start()
        #expect(!server.contentHashes().contains(content), "the older copy predates the photo")
        return (photo, content)
    }

    /// With optimize storage on, the photo the restored server lacks must not become
    /// online-only (it would be lost): it stays local, is backed up again, and only then may go.
    @Test func aServerRestoredFromAnOlderCopyLosesNoPhoto() throws {
        try Self.withServerAndDrive("vdrive-online-older") { server, drive in
            let (photo, content) = try Self.backUpThenRestoreServerFromBefore(server, drive, seed: 50)
            try Self.settings(drive, "cache-size", "1K")
            try Self.settings(drive, "optimize-storage", "on")
            try eventually("the photo is backed up again to the restored server") { server.contentHashes().contains(content) }
            #expect(Self.log(drive).contains("does not hold 1 file version(s) this drive had sent"), "the mount says why: \(Self.log(drive).suffix(600))")
            #expect(try readFile(drive.path("Camera Roll/R.jpg")) == photo, "read back byte-equal, local or fetched")
            #expect(BackupEndToEndTests.xattr(drive.path("Camera Roll/R.jpg"), "user.vdrive.backup") == "done")
        }
    }

    /// Without optimize storage: the next mount's sync audits what is done, finds the
    /// version the restored server lacks, and sends it again.
    @Test func aServerRestoredFromAnOlderCopyGetsThePhotoAgainAtTheNextMount() throws {
        try Self.withServerAndDrive("vdrive-online-audit") { server, drive in
            let (photo, content) = try Self.backUpThenRestoreServerFromBefore(server, drive, seed: 51)
            try drive.unmount()
            try drive.start()
            try eventually("the photo is backed up again to the restored server") { server.contentHashes().contains(content) }
            #expect(try readFile(drive.path("Camera Roll/R.jpg")) == photo)
        }
    }

    @Test func pendingPhotosAreNeverEvicted() throws {
        try Self.withServerAndDrive("vdrive-online-pending") { server, drive in
            server.stop()   // nothing can be backed up: the photos stay pending
            try Self.settings(drive, "cache-size", "1K")
            try Self.settings(drive, "optimize-storage", "on")
            let photos = try (0..<2).map { try BackupEndToEndTests.photo(30 + $0) }
            for (i, p) in photos.enumerated() { try writeFile(drive.path("Camera Roll/Q\(i).jpg"), p) }
            // Two whole passes of the bound after the photos were stored: the last pass the
            // log counts now may have begun before.
            let seen = Self.boundPasses(drive)
            try eventually("two passes of the cache bound after the photos were stored (log: \(Self.log(drive).suffix(300)))") {
                Self.boundPasses(drive) >= seen + 2
            }
            for p in photos { #expect(FileManager.default.fileExists(atPath: Self.blockFile(drive, p))) }
            #expect(BackupEndToEndTests.xattr(drive.path("Camera Roll/Q0.jpg"), "user.vdrive.backup") != "done")
            #expect(try readFile(drive.path("Camera Roll/Q1.jpg")) == photos[1])
        }
    }

    @Test(arguments: Backend.allCases) func aDamagedBlockHealsFromTheServer(_ backend: Backend) throws {
        try Self.withServerAndDrive("vdrive-online-heal", backend: backend, foreground: true) { server, drive in
            let photo = try BackupEndToEndTests.photo(40)
            try writeFile(drive.path("Camera Roll/H.jpg"), photo)
            try BackupEndToEndTests.waitForBackup(drive, done: 1)
            drive.kill9()
            // A power cut: the flusher's record never reached the disk, and the block's bytes
            // are wrong. The next mount re-hashes the block and marks it damaged.
            do {
                let db = try Database(path: drive.state + "/catalog.sqlite")
                try db.run("UPDATE drive_meta SET value = 0 WHERE key = 'durable_gen'")
            }
            let path = Self.blockFile(drive, photo)
            chmod(path, 0o600)
            let fd = try FileIO.open(path, O_WRONLY)
            try [UInt8](repeating: 0, count: 4096).withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
            FileIO.close(fd)
            try drive.start()
            #expect(try readFile(drive.path("Camera Roll/H.jpg")) == photo, "fetched back from the server")
            #expect(try sha256(ofFile: path) == SHA256Hasher.digest(photo).hex, "the store holds the right bytes again")
            #expect(Self.log(drive).contains("fetched again from the server"))
        }
    }

    @Test func serverDownFailsReadsFastWithOneLogLineAndReadsWorkWhenItIsBack() throws {
        try Self.withServerAndDrive("vdrive-online-down") { server, drive in
            let photo = try Self.onlineOnlyPhoto(drive, "D.jpg", 50)

            server.stop()
            let started = Date()
            for _ in 0..<3 {
                guard case .failure(let e) = Self.readPart(drive.path("Camera Roll/D.jpg"), count: 1000, at: 0) else {
                    Issue.record("a read of an online-only file succeeded with the server down"); continue
                }
                #expect(e == Errno.ioError)
            }
            // The client's timeouts bound each read (2 s to connect, 5 s stalled); refused is at once.
            #expect(Date().timeIntervalSince(started) < 30, "no read hangs")
            #expect(BackupEndToEndTests.list(drive.path("Camera Roll")).contains("D.jpg"), "listing works")
            // The read path's line (the Backups/ feed follower logs its own outage once too).
            let outageLines = Self.log(drive).components(separatedBy: "\n").filter { $0.contains("reads of blocks not held here fail") }
            #expect(outageLines.count == 1, "one log line per outage: \(outageLines)")

            try server.start()
            #expect(try readFile(drive.path("Camera Roll/D.jpg")) == photo)
        }
    }

    /// A listener on `port` that never accepts: connections complete in the kernel's
    /// backlog and requests are never answered (a hung server). Close the result.
    static func blackHole(port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else { close(fd); throw TestFailure("cannot listen on \(port): errno \(errno)") }
        return fd
    }

    /// Writes photo `index` to `Camera Roll/<name>`, waits for its backup and makes it
    /// online-only. Returns its bytes.
    static func onlineOnlyPhoto(_ drive: MountedDrive, _ name: String, _ index: Int) throws -> [UInt8] {
        let photo = try BackupEndToEndTests.photo(index)
        try writeFile(drive.path("Camera Roll/" + name), photo)
        try BackupEndToEndTests.waitForBackup(drive, done: 1)
        try makeOnlineOnly(drive, photo)
        return photo
    }

    /// Makes a backed-up file online-only (optimize storage, a 1 KiB bound).
    static func makeOnlineOnly(_ drive: MountedDrive, _ bytes: [UInt8]) throws {
        try settings(drive, "cache-size", "1K")
        try settings(drive, "optimize-storage", "on")
        try eventually("the photo becomes online-only", within: 20) { !FileManager.default.fileExists(atPath: blockFile(drive, bytes)) }
    }

    /// An online-only file is read past the page cache (direct I/O) where the kernel lets
    /// such files be mapped: a program that maps it still reads the right bytes, and
    /// reads through the same descriptor too.
    @Test(arguments: Backend.allCases) func anOnlineOnlyPhotoCanBeMappedAndRead(_ backend: Backend) throws {
        try Self.withServerAndDrive("vdrive-online-mmap", backend: backend) { _, drive in
            let photo = try Self.onlineOnlyPhoto(drive, "M.jpg", 61)
            let fd = open(drive.path("Camera Roll/M.jpg"), O_RDONLY)
            try #require(fd >= 0, "open M.jpg: errno \(errno)")
            let map = mmap(nil, photo.count, PROT_READ, MAP_SHARED, fd, 0)
            #expect(map != MAP_FAILED, "mmap of an online-only photo: errno \(errno)")
            if let map, map != MAP_FAILED {
                #expect(Array(UnsafeRawBufferPointer(start: map, count: photo.count)) == photo)
                munmap(map, photo.count)
            }
            var buffer = [UInt8](repeating: 0, count: photo.count + 1)
            #expect(pread(fd, &buffer, buffer.count, 0) == photo.count)
            #expect(Array(buffer.prefix(photo.count)) == photo)
            close(fd)
            #expect(try readFile(drive.path("Camera Roll/M.jpg")) == photo)
        }
    }

    @Test func aServerThatStopsAnsweringFailsReadsWithinTheTimeout() throws {
        try Self.withServerAndDrive("vdrive-online-hung") { server, drive in
            _ = try Self.onlineOnlyPhoto(drive, "S.jpg", 60)
            server.stop()
            let hole = try Self.blackHole(port: server.port)
            defer { close(hole) }
            let started = Date()
            guard case .failure(let e) = Self.readPart(drive.path("Camera Roll/S.jpg"), count: 1000, at: 0) else {
                Issue.record("a read succeeded against a server that does not answer"); return
            }
            #expect(e == Errno.ioError)
            // The remote's low-speed timeout is 5 s (connect: 2 s): bounded, not a hang.
            #expect(Date().timeIntervalSince(started) < 30)
            #expect(BackupEndToEndTests.list(drive.path("Camera Roll")).contains("S.jpg"), "listing works")
        }
    }

    @Test(arguments: Backend.allCases) func aUsersReadIsAllowedWhilePaused(_ backend: Backend) throws {
        try Self.withServerAndDrive("vdrive-online-paused", backend: backend) { _, drive in
            let video = pseudoRandomBytes(20_000_000, seed: 91)
            try writeFile(drive.path("Camera Roll/P.mov"), video)
            try BackupEndToEndTests.waitForBackup(drive, done: 1)
            try Self.settings(drive, "cache-size", "1K")
            try Self.settings(drive, "optimize-storage", "on")
            try eventually("the video becomes online-only (0 B local)", within: 20) {
                (try? drive.vdrive(["status", "--state", drive.state]).stdout.contains(" 0 B local")) ?? false
            }
            try Self.settings(drive, "paused", "on")
            // Prefetch is held; the reader's own fetches are interactive and go.
            #expect(try sha256(ofFile: drive.path("Camera Roll/P.mov")) == SHA256Hasher.digest(video).hex)
        }
    }

    @Test func reading64KiBOfA200MBOnlineOnlyFileTransfersLittle() throws {
        let dir = TemporaryDirectory("vdrive-online-range"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let proxy = try LinkProxy(targetPort: UInt16(server.port), oneWayDelay: 0, bytesPerSecond: 1e12)
        defer { proxy.stop() }
        let drive = try MountedDrive(label: "vdrive-online-range-mount",
                                     arguments: ["--server", "http://127.0.0.1:\(proxy.port)", "--token-file", server.tokenFile, "--camera-backup"],
                                     environment: Self.environment)
        defer { drive.stop() }
        let video = pseudoRandomBytes(200_000_000, seed: 77)
        try writeFile(drive.path("Camera Roll/V.mp4"), video)
        try BackupEndToEndTests.waitForBackup(drive, done: 1, seconds: 300)
        try Self.settings(drive, "cache-size", "1K")
        try Self.settings(drive, "optimize-storage", "on")
        try eventually("the video becomes online-only (0 B local)") {
            (try? drive.vdrive(["status", "--state", drive.state]).stdout.contains("0 B local")) ?? false
        }
        let before = proxy.bytesFromTarget
        let offset: Int64 = 100_000_000
        let got = Self.readPart(drive.path("Camera Roll/V.mp4"), count: 64 << 10, at: offset)
        #expect((try? got.get()) == Array(video[Int(offset)..<(Int(offset) + (64 << 10))]))
        let sent = proxy.bytesFromTarget - before
        print("reading 64 KiB of a 200 MB online-only file: \(sent) bytes from the server")
        #expect(sent < 2 << 20, "\(sent) bytes transferred")
        // Then the whole file in order (whole blocks, fetched ahead): byte-equal, once.
        #expect(try sha256(ofFile: drive.path("Camera Roll/V.mp4")) == SHA256Hasher.digest(video).hex)
        let whole = proxy.bytesFromTarget - before
        #expect(whole < Int(Double(video.count) * 1.05), "\(whole) bytes for a \(video.count)-byte file")
    }
}
