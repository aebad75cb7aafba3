import Foundation
import Storage

/// Where a test server keeps blocks: its data folder (embedded) or a real SeaweedFS
/// started for the test (scaled: `--store s3://…`).
enum StoreKind: String, CaseIterable, Sendable {
    case folder, s3
}

/// A real `vdrive serve` on a free loopback port, with one device token; with
/// `store: .s3`, also a real SeaweedFS in `folder` that the server keeps blocks in; with
/// `processes: 2`, a second `vdrive serve` on the same records and blocks (a data folder
/// of its own), as a scaled server runs. Always call `stop()` (in a defer): it stops
/// them all.
final class LocalServer {
    /// The first process's data folder (the device tokens are made there).
    let data: String
    let tokenFile: String
    /// One per process: its data folder and its output (where it says its address).
    private let folders: [(data: String, output: String)]
    private var processes: [Process?]
    /// Each process's URL, once started.
    private(set) var urls: [String]
    /// 0 until the first start picks a free port; a restart reuses it.
    private var ports: [Int]
    /// The object store of a `.s3` server.
    let seaweed: SeaweedFS?

    /// The PostgreSQL URL of its records (`--database`), nil for SQLite in the data folder.
    let database: String?

    /// More `vdrive serve` options (`--quota`), for the next start of every process.
    var serveArguments: [String] = []

    var process: Process? { processes[0] }
    var url: String { urls[0] }
    var port: Int { ports[0] }

    /// `records`: "sqlite", or "postgresql" for a fresh database of the test cluster.
    init(folder: String, port: Int = 0, device: String = "test-device", store: StoreKind = .folder, records: String = "sqlite",
         processes count: Int = 1) throws {
        database = records == "postgresql" ? try PostgresCluster.freshDatabase() : nil
        folders = (0..<count).map { i in
            let suffix = i == 0 ? "" : "-\(i + 1)"
            return (folder + "/server-data" + suffix, folder + "/server\(suffix).out")
        }
        data = folders[0].data
        tokenFile = folder + "/token"
        processes = Array(repeating: nil, count: count)
        urls = Array(repeating: "", count: count)
        ports = [port] + Array(repeating: 0, count: count - 1)
        seaweed = store == .s3 ? try SeaweedFS(folder: folder + "/seaweed") : nil
        try addDevice(device, tokenFile: tokenFile)
        try start()
    }

    /// The embedded server, or the scaled one: records in PostgreSQL, blocks in
    /// SeaweedFS, two processes.
    convenience init(folder: String, device: String = "test-device", backend: Backend) throws {
        switch backend {
        case .embedded: try self.init(folder: folder, device: device)
        case .scaled: try self.init(folder: folder, device: device, store: .s3, records: "postgresql", processes: 2)
        }
    }

    /// Another device's token on the same server (a second machine, a reinstall).
    func addDevice(_ name: String, tokenFile: String) throws {
        let added = try runCommand(vdriveBinary, ["serve", "device", "add", name, "--data", data] + databaseArguments)
        guard added.status == 0, let token = added.stdout.split(separator: "\n").first else {
            throw TestFailure("device add \(name) failed: \(added.stderr)")
        }
        try String(token).write(toFile: tokenFile, atomically: true, encoding: .utf8)
    }

    var databaseArguments: [String] { database.map { ["--database", $0] } ?? [] }

    /// Starts every process (again after `stopServer`, on the same ports).
    func start() throws {
        for i in folders.indices where processes[i] == nil { try start(i) }
    }

    private func start(_ i: Int) throws {
        let outputFile = folders[i].output
        _ = FileManager.default.createFile(atPath: outputFile, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: vdriveBinary)
        p.arguments = ["serve", "--data", folders[i].data, "--listen", "127.0.0.1:\(ports[i])"]
            + (seaweed.map { ["--store", $0.storeURL] } ?? []) + databaseArguments + serveArguments
        if let seaweed { p.environment = ProcessInfo.processInfo.environment.merging(seaweed.environment) { $1 } }
        p.standardOutput = FileHandle(forWritingAtPath: outputFile)
        // Its log (the access log's lines, errors) beside its output, for a test to read;
        // appended to, so what a process said before a restart stays (`accessLog(since:)`).
        let log = open(outputFile + ".log", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        p.standardError = log >= 0 ? FileHandle(fileDescriptor: log, closeOnDealloc: true) : FileHandle.nullDevice
        try p.run()
        processes[i] = p
        for _ in 0..<200 {
            let out = (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? ""
            if let range = out.range(of: "listening on ") {
                urls[i] = String(out[range.upperBound...].prefix { $0 != " " && $0 != "\n" })
                ports[i] = Int(urls[i].split(separator: ":").last ?? "") ?? ports[i]
                return
            }
            usleep(25_000)
        }
        throw TestFailure("vdrive serve did not start")
    }

    func stop() {
        stopServer()
        seaweed?.stop()
    }

    /// Stops the server processes only (a restart keeps the store running); `signal`
    /// SIGKILL: as a crash, nothing finished.
    func stopServer(signal: Int32 = SIGTERM) {
        for i in processes.indices {
            guard let p = processes[i] else { continue }
            kill(p.processIdentifier, signal)
            p.waitUntilExit()
            processes[i] = nil
        }
    }

    /// Every process's whole log (access lines and errors), across restarts.
    func log() -> String {
        folders.map { (try? String(contentsOfFile: $0.output + ".log", encoding: .utf8)) ?? "" }.joined(separator: "\n")
    }

    /// Where each process's log ends now; `accessLog(since:)` reads what follows.
    func logMark() -> [UInt64] {
        folders.map { (try? FileManager.default.attributesOfItem(atPath: $0.output + ".log")[.size] as? UInt64) ?? 0 }
    }

    /// The access log lines every process wrote since `mark` (across restarts).
    func accessLog(since mark: [UInt64]) -> [AccessLine] {
        zip(folders, mark).flatMap { folder, offset -> [AccessLine] in
            guard let handle = FileHandle(forReadingAtPath: folder.output + ".log") else { return [] }
            defer { try? handle.close() }
            try? handle.seek(toOffset: offset)
            let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
            return text.split(separator: "\n").compactMap(AccessLine.init)
        }
    }

    /// The tree's latest version: `treeChanges(since:)` counts the changes applied after it.
    func treeVersion() -> Int64 { Int64(records("SELECT max(version) FROM tree_nodes").first ?? "") ?? 0 }

    /// The nodes a change applied after `version` touched (each node counted once: its
    /// last change).
    func treeChanges(since version: Int64) -> Int { Int(records("SELECT count(*) FROM tree_nodes WHERE version > \(version)").first ?? "") ?? 0 }

    /// Bytes the server processes have written so far (/proc/PID/io wchar): received blob bytes plus a little metadata.
    func bytesWritten() -> Int64 {
        processes.compactMap { $0 }.reduce(0) { total, p in
            guard let io = try? String(contentsOfFile: "/proc/\(p.processIdentifier)/io", encoding: .utf8) else { return total }
            let line = io.split(separator: "\n").first { $0.hasPrefix("wchar:") }
            return total + (line.flatMap { Int64($0.split(separator: " ").last ?? "0") } ?? 0)
        }
    }

    /// The first column of each row `sql` selects in the server's records (PostgreSQL
    /// through psql, else the SQLite file beside the running server, WAL).
    func records(_ sql: String) -> [String] {
        if let database, let cluster = PostgresCluster.shared {
            let text = (try? cluster.psql(PostgresCluster.databaseName(of: database), sql)) ?? ""
            return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        }
        guard let db = try? Database(path: data + "/server.db") else { return [] }
        return (try? db.query(sql) { $0.string(0) ?? "" }) ?? []
    }

    /// The workspace's identity the server keeps (`settings.workspace_id`), in hex.
    func workspaceID() -> String? {
        records(database == nil ? "SELECT lower(hex(value)) FROM settings WHERE key = 'workspace_id'"
                                : "SELECT encode(value, 'hex') FROM settings WHERE key = 'workspace_id'").first
    }

    /// The content hashes the server holds (verified manifests).
    func contentHashes() -> Set<String> { Set(records("SELECT hash FROM contents")) }

    /// True once the server holds a version of `path`.
    func hasRecord(_ path: String) -> Bool {
        !records("SELECT 1 FROM file_versions WHERE path = '\(path.replacingOccurrences(of: "'", with: "''"))'").isEmpty
    }

    /// How many blocks the server stores: block files and blocks in its pack files, or
    /// with an object store the blocks it verified and recorded.
    func blockCount() -> Int {
        seaweed == nil ? blockFileCount() + packedBlockCount() : Int(records("SELECT count(*) FROM blocks").first ?? "") ?? 0
    }

    /// How many blocks are in the server's pack files (those that came in block packs).
    func packedBlockCount() -> Int {
        guard let index = try? Database(path: data + "/blobs/packs/index.db", options: .init(readOnly: true, create: false)) else { return 0 }
        return (try? index.queryOne("SELECT count(*) FROM packed") { $0.int(0) }) ?? 0
    }

    /// How many block files are in the server's data folder (none with an object store).
    func blockFileCount() -> Int {
        let root = data + "/blobs"
        var count = 0
        for folder in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] where folder.count == 2 {
            count += ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + folder)) ?? []).filter { $0.count == 64 }.count
        }
        return count
    }

    var mountArguments: [String] { mountArguments(tokenFile: tokenFile) }

    /// A device's `--server` and `--token-file`, through process `process` (counted
    /// round the processes there are: a single server answers for every number).
    func mountArguments(tokenFile: String, process: Int = 0) -> [String] {
        ["--server", urls[process % urls.count], "--token-file", tokenFile]
    }
}

/// One line of a server's access log (`access method=PATCH route=/v1/tus/{id} status=204 in=4194304 …`,
/// Sources/Server/AccessLog.swift); nil for any other line.
struct AccessLine {
    let method: String
    let route: String
    let status: Int
    let bytesIn: Int64
    /// The device whose token the request carried; nil for none (a presigned tus PATCH).
    let device: String?
    /// How long the server took to answer (a held request: how long it was held).
    let milliseconds: Double

    init?(_ line: Substring) {
        guard line.hasPrefix("access ") else { return nil }
        var fields: [Substring: Substring] = [:]
        for pair in line.split(separator: " ") {
            guard let eq = pair.firstIndex(of: "=") else { continue }
            fields[pair[..<eq]] = pair[pair.index(after: eq)...]
        }
        guard let method = fields["method"], let route = fields["route"], let status = fields["status"].flatMap({ Int($0) }),
              let bytesIn = fields["in"].flatMap({ Int64($0) }), let ms = fields["ms"].flatMap({ Double($0) }) else { return nil }
        self.method = String(method)
        self.route = String(route)
        self.status = status
        self.bytesIn = bytesIn
        device = fields["device"].flatMap { $0 == "-" ? nil : String($0) }
        milliseconds = ms
    }

    /// A block's bytes reaching the server: a tus PATCH, a whole-block PUT or a pack (embedded),
    /// or the verification that follows each presigned PUT to the store (scaled: the
    /// bytes go to the store, the server hears of each block once).
    var isBlockUpload: Bool {
        (method == "PATCH" && route == "/v1/tus/{id}") || (method == "PUT" && route == "/v1/blocks/{hash}") || (method == "POST" && route == "/v1/blocks")
            || (method == "POST" && route == "/v1/blocks/{hash}/verify")
    }

    /// Asking for a content's upload plan (`POST /v1/uploads`).
    var isUploadPlan: Bool { method == "POST" && route == "/v1/uploads" }

    /// A batch of tree changes (`POST /v1/tree/changes`).
    var isTreeChanges: Bool { method == "POST" && route == "/v1/tree/changes" }
}
