import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// `vdrive restore` against a real `vdrive serve`: two devices with the same names,
/// byte-equal restores with capture dates as mtimes, the date filters, and a restore
/// killed with SIGKILL that resumes without fetching finished files again.
@Suite(.tags(.endToEnd), .serialized) struct RestoreTests {
    /// A real server with two devices that back up, "phone" and "laptop", a third that
    /// restores, "new-laptop", and their token files. Scaled: records in PostgreSQL,
    /// blocks in a real SeaweedFS, and two server processes: the devices back up through
    /// `server`, the restores read through `reader` (the same process when embedded).
    final class Fixture {
        let dir = TemporaryDirectory()
        let server: ServerProcess
        let reader: ServerProcess
        let store: SeaweedFS?
        /// The options of `vdrive serve` on these records and blocks (none when embedded).
        let backends: [String]
        let phone: WorkspaceClient, laptop: WorkspaceClient
        let phoneTokenFile: String, laptopTokenFile: String, newTokenFile: String

        init(_ backend: Backend = .embedded) throws {
            let data = dir.path + "/data"
            store = backend == .scaled ? try SeaweedFS(folder: dir.path + "/seaweed") : nil
            let database = try (backend == .scaled ? Records.postgres : .sqlite).freshLocation()
            let credentials = dir.path + "/credentials"
            backends = try Records.arguments(database) + (store.map { ["--store", try $0.storeURL(credentialsIn: credentials)] } ?? [])
            let registry = try DeviceRegistry(dataDirectory: data, database: database)
            let phoneToken = try registry.add("phone"), laptopToken = try registry.add("laptop")
            phoneTokenFile = dir.path + "/phone.token"
            laptopTokenFile = dir.path + "/laptop.token"
            newTokenFile = dir.path + "/new-laptop.token"
            writeFile(phoneTokenFile, Array(phoneToken.utf8))
            writeFile(laptopTokenFile, Array(laptopToken.utf8))
            writeFile(newTokenFile, Array(try registry.add("new-laptop").utf8))
            server = try ServerProcess(data: data, extra: backends)
            reader = backend == .scaled ? try ServerProcess(data: dir.path + "/data-2", extra: backends) : server
            phone = WorkspaceClient(baseURL: server.base, token: phoneToken)
            laptop = WorkspaceClient(baseURL: server.base, token: laptopToken)
        }

        func stop() {
            server.kill(SIGTERM)
            reader.kill(SIGTERM)
            store?.stop()
            dir.remove()
        }

        /// Uploads `f` with `client` and records it at `path`.
        @discardableResult
        func backUp(_ client: WorkspaceClient, _ f: TestFile, _ path: String, capture: Int64?, mtime: Int64 = 1_600_000_000, sequence: Int64 = 1) throws -> FileRecord {
            let fd = f.open()
            defer { close(fd) }
            try client.uploadFile(fd: fd, size: f.size)
            return try client.recordFile(FileRecord(path: path, hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                    captureDate: capture, mtime: mtime, deviceSequence: sequence))
        }

        /// `count` distinct phone photos of `size` bytes at `Camera Roll/IMG_<first + i>.jpg`.
        func backUpPhotos(count: Int, size: Int, seed: UInt64, first: Int, capture: Int64) throws -> [TestFile] {
            try (0..<count).map { i in
                let f = TestFile(in: dir.path, size: size, seed: seed + UInt64(i))
                try backUp(phone, f, "Camera Roll/IMG_\(first + i).jpg", capture: capture, sequence: Int64(i + 1))
                return f
            }
        }

        /// Starts `vdrive restore phone DEST` (as the new device) in the background,
        /// through `proxy` or straight to the server.
        func startRestore(into dest: String, through proxy: LinkProxy?, arguments: [String] = [], environment: [String: String] = [:],
                          stderr: Any = FileHandle.nullDevice) throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: vdriveBinary())
            let base = proxy.map { "http://127.0.0.1:\($0.port)" } ?? server.base
            process.arguments = ["restore", "phone", dest, "--server", base, "--token-file", newTokenFile] + isolated + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(isolation) { $1 }.merging(environment) { $1 }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = stderr
            try process.run()
            return process
        }

        /// Runs `vdrive restore` as the new device (or `tokenFile`) against `base` (default: the reader).
        func restore(_ arguments: [String], base: String? = nil, tokenFile: String? = nil) throws -> (Int32, String, String) {
            let r = try runCommand(vdriveBinary(), ["restore"] + isolated + arguments + ["--server", base ?? reader.base, "--token-file", tokenFile ?? newTokenFile],
                                   environment: isolation)
            return (r.status, r.stdout, r.stderr)
        }

        /// The restores see no policy of this machine: settings in the test's folder
        /// (none: nothing paused) and a system root without a route or a battery (not
        /// metered, on AC). A test's own `--config` comes later and wins.
        var isolated: [String] { ["--config", dir.path + "/settings.json"] }
        var isolation: [String: String] { ["VDRIVE_SYSTEM_ROOT": dir.path + "/no-system"] }

        /// Bytes the server processes (and the store, when scaled) have written to
        /// sockets and files so far (sendfile included).
        func serverBytesWritten() throws -> Int64 {
            let pids = Set([server.process.processIdentifier, reader.process.processIdentifier] + (store?.pid.map { [$0] } ?? []))
            return try pids.reduce(0) { total, pid in
                let io = try String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8)
                guard let line = io.split(separator: "\n").first(where: { $0.hasPrefix("wchar:") }), let n = Int64(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) else {
                    throw TestFailure("no wchar in /proc/PID/io: \(io)")
                }
                return total + n
            }
        }
    }

    static func day(_ text: String) -> Int64 {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let p = text.split(separator: "-").map { Int($0)! }
        return Int64(calendar.date(from: DateComponents(year: p[0], month: p[1], day: p[2], hour: 10))!.timeIntervalSince1970)
    }

    static func mtime(_ path: String) throws -> Int64 { Int64(try FileIO.status(path).st_mtim.tv_sec) }

    static func restoredFiles(_ root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter {
            var isDir: ObjCBool = false
            return FileManager.default.fileExists(atPath: root + "/" + $0, isDirectory: &isDir) && !isDir.boolValue
        }.sorted()
    }

    /// On both back ends: on the scaled one the phone backs up through one server process,
    /// and the restore reads through the other, from the store. With dedup: one content
    /// in three files of two devices, one of them deleted by the administrator and
    /// recorded again.
    @Test(arguments: Backend.allCases) func restoresOneDeviceByteEqualWithCaptureDates(_ backend: Backend) throws {
        let fx = try Fixture(backend)
        defer { fx.stop() }
        let d = fx.dir.path
        let p1 = TestFile(in: d, size: 300_000, seed: 201), l1 = TestFile(in: d, size: 310_000, seed: 202)
        let p2old = TestFile(in: d, size: 5000, seed: 203), p2 = TestFile(in: d, size: 6000, seed: 204)
        let shared = TestFile(in: d, size: 70_000, seed: 205)
        // A video with a hole: block 1 is all zeros (never stored, never fetched).
        let video = TestFile(in: d, name: "video", bytes: randomBytes(Blocks.size, seed: 206) + [UInt8](repeating: 0, count: Blocks.size) + randomBytes(1000, seed: 207))
        try fx.backUp(fx.phone, p1, "Camera Roll/IMG_0001.jpg", capture: Self.day("2019-07-01"))
        try fx.backUp(fx.phone, p2old, "Camera Roll/IMG_0002.jpg", capture: Self.day("2020-01-15"), sequence: 2)
        try fx.backUp(fx.phone, p2, "Camera Roll/IMG_0002.jpg", capture: Self.day("2020-01-16"), sequence: 3)
        try fx.backUp(fx.phone, shared, "Camera Roll/shared.jpg", capture: Self.day("2019-07-02"), sequence: 4)
        try fx.backUp(fx.phone, video, "Camera Roll/VID_0001.mov", capture: nil, mtime: Self.day("2021-03-03"), sequence: 5)
        try fx.backUp(fx.laptop, l1, "Camera Roll/IMG_0001.jpg", capture: Self.day("2019-07-01"))
        try fx.backUp(fx.laptop, shared, "Camera Roll/shared.jpg", capture: Self.day("2019-07-02"), sequence: 2)
        try fx.backUp(fx.phone, shared, "Camera Roll/Trip/shared copy.jpg", capture: Self.day("2019-07-02"), sequence: 6)
        let deleted = try runCommand(vdriveBinary(), ["serve", "backup", "delete", "phone", "Camera Roll/shared.jpg", "--yes", "--data", fx.server.data] + fx.backends)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        try fx.backUp(fx.phone, shared, "Camera Roll/shared.jpg", capture: Self.day("2019-07-02"), sequence: 7)

        let dest = d + "/restored"
        let (status, out, err) = try fx.restore(["phone", dest])
        #expect(status == 0, "\(err)")
        #expect(err.isEmpty, "quiet in a pipe: \(err)")
        #expect(out.hasPrefix("Restored 5 file(s) of device 'phone'"), "\(out)")
        #expect(Self.restoredFiles(dest) == ["Camera Roll/IMG_0001.jpg", "Camera Roll/IMG_0002.jpg", "Camera Roll/Trip/shared copy.jpg",
                                             "Camera Roll/VID_0001.mov", "Camera Roll/shared.jpg"])
        for (path, f, date) in [("IMG_0001.jpg", p1, Self.day("2019-07-01")), ("IMG_0002.jpg", p2, Self.day("2020-01-16")),
                                ("shared.jpg", shared, Self.day("2019-07-02")), ("Trip/shared copy.jpg", shared, Self.day("2019-07-02")),
                                ("VID_0001.mov", video, Self.day("2021-03-03"))] {
            let restored = dest + "/Camera Roll/" + path
            #expect(FileManager.default.contents(atPath: restored) == Data(f.bytes), "\(path)")
            #expect(try Self.mtime(restored) == date, "\(path)")
        }
        // The hole stayed a hole: fewer blocks allocated than the size needs.
        let st = try FileIO.status(dest + "/Camera Roll/VID_0001.mov")
        #expect(Int64(st.st_blocks) * 512 < video.size - Int64(Blocks.size) / 2)

        // Again: everything is there, nothing is fetched (a few KB of JSON at most).
        let before = try fx.serverBytesWritten()
        let (again, againOut, _) = try fx.restore(["phone", dest])
        #expect(again == 0)
        #expect(againOut.contains("Restored 0 file(s)") && againOut.contains("5 already there"), "\(againOut)")
        #expect(try fx.serverBytesWritten() - before < 64 << 10)

        // The laptop's own IMG_0001.jpg, not the phone's.
        let (laptopStatus, _, _) = try fx.restore(["laptop", d + "/laptop"], tokenFile: fx.laptopTokenFile)
        #expect(laptopStatus == 0)
        #expect(FileManager.default.contents(atPath: d + "/laptop/Camera Roll/IMG_0001.jpg") == Data(l1.bytes))

        // Dates: July 2019 only (both days included).
        let july = d + "/july"
        let (filtered, filteredOut, _) = try fx.restore(["phone", july, "--since", "2019-07-01", "--until", "2019-07-31"])
        #expect(filtered == 0)
        #expect(Self.restoredFiles(july) == ["Camera Roll/IMG_0001.jpg", "Camera Roll/Trip/shared copy.jpg", "Camera Roll/shared.jpg"])
        #expect(filteredOut.contains("2 outside the dates"), "\(filteredOut)")
        let (since, _, _) = try fx.restore(["phone", d + "/since", "--since", "2020-01-16"])
        #expect(since == 0)
        #expect(Self.restoredFiles(d + "/since") == ["Camera Roll/IMG_0002.jpg", "Camera Roll/VID_0001.mov"])

        // Another file under a restored name is left alone and reported (73); the rest is restored.
        let clash = d + "/clash"
        try FileManager.default.createDirectory(atPath: clash + "/Camera Roll", withIntermediateDirectories: true)
        writeFile(clash + "/Camera Roll/shared.jpg", Array("mine".utf8))
        let (clashStatus, _, clashErr) = try fx.restore(["phone", clash])
        #expect(clashStatus == 73)
        #expect(clashErr.contains("not restored: \(clash)/Camera Roll/shared.jpg exists and is not this backup"), "\(clashErr)")
        #expect(FileManager.default.contents(atPath: clash + "/Camera Roll/shared.jpg") == Data("mine".utf8))
        #expect(Self.restoredFiles(clash).count == 5)

        // Usage and unknown devices.
        #expect(try fx.restore(["phone", d + "/x", "--since", "2019-13-01"]).0 == 64)
        #expect(try fx.restore(["phone"]).0 == 64)
        let (unknown, _, unknownErr) = try fx.restore(["tablet", d + "/x"])
        #expect(unknown == 66)
        #expect(unknownErr.contains("device 'tablet' has no backups"))
        let (help, helpOut, _) = try run(vdriveBinary(), ["restore", "--help"])
        #expect(help == 0 && helpOut.contains("Usage: vdrive restore DEVICE DEST"))
    }

    /// SIGKILL while restoring through a slow link, then again: the files that were in
    /// place are not fetched again (counted on the server), and every file ends equal.
    @Test func killedRestoreResumesWithoutFetchingFinishedFiles() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        let count = 30, size = 1 << 20
        let files = try fx.backUpPhotos(count: count, size: size, seed: 300, first: 1000, capture: Self.day("2022-05-05"))
        // About 3 s for everything: room to kill it halfway.
        let proxy = try LinkProxy(targetPort: fx.server.port, oneWayDelay: 0.001, bytesPerSecond: 10_000_000)
        defer { proxy.stop() }
        let dest = fx.dir.path + "/restored"
        let process = try fx.startRestore(into: dest, through: proxy)
        let finished = { Self.restoredFiles(dest).filter { !$0.hasSuffix(".vdrive-restore") } }
        let deadline = Date().addingTimeInterval(30)
        while finished().count < count / 3 && Date() < deadline && process.isRunning { usleep(5_000) }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let done = finished()
        #expect(done.count >= count / 3 && done.count < count, "killed after \(done.count) files")
        for path in done {  // a file under its final name is complete
            let i = Int(path.dropFirst("Camera Roll/IMG_".count).prefix(4))! - 1000
            #expect(FileManager.default.contents(atPath: dest + "/" + path) == Data(files[i].bytes), "\(path)")
        }

        let before = try fx.serverBytesWritten()
        let (status, out, err) = try fx.restore(["phone", dest])
        let sent = try fx.serverBytesWritten() - before
        #expect(status == 0, "\(err)")
        #expect(out.contains("\(done.count) already there"), "\(out)")
        let left = Int64(count - done.count) * Int64(size)
        // At most what was left (a half-fetched file may even need less), plus JSON.
        #expect(sent < left + (64 << 10), "server sent \(sent) bytes for \(left) left")
        #expect(sent > left - Int64(size) - 1, "the count must see the block downloads (sendfile): \(sent)")
        #expect(finished().count == count)
        #expect(Self.restoredFiles(dest).count == count)  // no temporary file left behind
        for (i, f) in files.enumerated() {
            #expect(FileManager.default.contents(atPath: dest + "/Camera Roll/IMG_\(1000 + i).jpg") == Data(f.bytes))
        }
    }

    /// The server dies mid-restore: the restore stops trying (one line per file not
    /// restored), exits 75; with the server back, running it again finishes the job.
    @Test func serverGoneMidRestoreExits75ThenFinishes() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        let count = 12
        let files = try fx.backUpPhotos(count: count, size: 1 << 20, seed: 400, first: 2000, capture: Self.day("2023-01-01"))
        let proxy = try LinkProxy(targetPort: fx.server.port, oneWayDelay: 0.001, bytesPerSecond: 4_000_000)
        defer { proxy.stop() }
        let dest = fx.dir.path + "/restored"
        let errors = Pipe()
        let process = try fx.startRestore(into: dest, through: proxy, stderr: errors)
        let deadline = Date().addingTimeInterval(30)
        while Self.restoredFiles(dest).filter({ !$0.hasSuffix(".vdrive-restore") }).count < 2 && Date() < deadline { usleep(5_000) }
        fx.server.kill(SIGKILL)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 75, "\(stderr)")
        #expect(stderr.contains("not restored: "), "\(stderr)")
        #expect(stderr.contains("not tried, the server was unreachable"), "\(stderr)")

        let again = try ServerProcess(data: fx.server.data)
        defer { again.kill(SIGTERM) }
        let (status, out, err) = try fx.restore(["phone", dest], base: again.base)
        #expect(status == 0, "\(err)")
        #expect(out.contains("already there"), "\(out)")
        #expect(Self.restoredFiles(dest).count == count)
        for (i, f) in files.enumerated() {
            #expect(FileManager.default.contents(atPath: dest + "/Camera Roll/IMG_\(2000 + i).jpg") == Data(f.bytes))
        }
    }
}
