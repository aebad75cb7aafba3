import Foundation
import Storage

/// Where a test server keeps blocks: its data folder (embedded) or a real SeaweedFS
/// started for the test (scaled: `--store s3://…`).
enum StoreKind: String, CaseIterable, Sendable {
    case folder, s3
}

/// A real `vdrive serve` on a free loopback port, with one device token; with
/// `store: .s3`, also a real SeaweedFS in `folder` that the server keeps blocks in.
/// Always call `stop()` (in a defer): it stops both.
final class LocalServer {
    let data: String
    let tokenFile: String
    private(set) var process: Process?
    private(set) var url = ""
    private let outputFile: String
    /// 0 until the first start picks a free port; a restart reuses it.
    private(set) var port: Int
    /// The object store of a `.s3` server.
    let seaweed: SeaweedFS?

    /// The PostgreSQL URL of its records (`--database`), nil for SQLite in the data folder.
    let database: String?

    /// `records`: "sqlite", or "postgresql" for a fresh database of the test cluster.
    init(folder: String, port: Int = 0, device: String = "test-device", store: StoreKind = .folder, records: String = "sqlite") throws {
        database = records == "postgresql" ? try PostgresCluster.freshDatabase() : nil
        data = folder + "/server-data"
        tokenFile = folder + "/token"
        outputFile = folder + "/server.out"
        self.port = port
        seaweed = store == .s3 ? try SeaweedFS(folder: folder + "/seaweed") : nil
        let added = try runCommand(vdriveBinary, ["serve", "device", "add", device, "--data", data] + databaseArguments)
        guard added.status == 0, let token = added.stdout.split(separator: "\n").first else {
            throw TestFailure("device add failed: \(added.stderr)")
        }
        try String(token).write(toFile: tokenFile, atomically: true, encoding: .utf8)
        try start()
    }

    /// Another device's token on the same server (a second machine, a reinstall).
    func addDevice(_ name: String, tokenFile: String) throws {
        let added = try runCommand(vdriveBinary, ["serve", "device", "add", name, "--data", data] + databaseArguments)
        guard added.status == 0, let token = added.stdout.split(separator: "\n").first else { throw TestFailure(added.stderr) }
        try String(token).write(toFile: tokenFile, atomically: true, encoding: .utf8)
    }

    var databaseArguments: [String] { database.map { ["--database", $0] } ?? [] }

    func start() throws {
        FileManager.default.createFile(atPath: outputFile, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: vdriveBinary)
        p.arguments = ["serve", "--data", data, "--listen", "127.0.0.1:\(port)"] + (seaweed.map { ["--store", $0.storeURL] } ?? []) + databaseArguments
        if let seaweed { p.environment = ProcessInfo.processInfo.environment.merging(seaweed.environment) { $1 } }
        p.standardOutput = FileHandle(forWritingAtPath: outputFile)
        p.standardError = FileHandle.nullDevice
        try p.run()
        process = p
        for _ in 0..<200 {
            let out = (try? String(contentsOfFile: outputFile, encoding: .utf8)) ?? ""
            if let range = out.range(of: "listening on ") {
                url = String(out[range.upperBound...].prefix { $0 != " " && $0 != "\n" })
                port = Int(url.split(separator: ":").last ?? "") ?? port
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

    /// Stops the server process only (a restart keeps the store running).
    func stopServer() {
        guard let p = process else { return }
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        process = nil
    }

    /// Bytes the server process has written so far (/proc/PID/io wchar): received blob bytes plus a little metadata.
    func bytesWritten() -> Int64 {
        guard let p = process, let io = try? String(contentsOfFile: "/proc/\(p.processIdentifier)/io", encoding: .utf8) else { return 0 }
        for line in io.split(separator: "\n") where line.hasPrefix("wchar:") {
            return Int64(line.split(separator: " ").last ?? "0") ?? 0
        }
        return 0
    }

    /// The complete blobs the server holds (its blob store: `blobs/ab/<sha256>`).
    /// The content hashes the server holds (verified manifests), read from its database.
    /// The workspace's identity the server keeps (`settings.workspace_id`), in hex.
    func workspaceID() -> String? {
        if let database, let cluster = PostgresCluster.shared {
            let name = PostgresCluster.databaseName(of: database)
            return try? cluster.psql(name, "SELECT encode(value, 'hex') FROM settings WHERE key = 'workspace_id'")
                .trimmingCharacters(in: .whitespacesAndNewlines)
        }
        guard let db = try? Database(path: data + "/server.db") else { return nil }
        return (try? db.queryOne("SELECT lower(hex(value)) FROM settings WHERE key = 'workspace_id'") { $0.string(0) }) ?? nil
    }

    func contentHashes() -> Set<String> {
        if let database, let cluster = PostgresCluster.shared {
            let name = PostgresCluster.databaseName(of: database)
            return Set(((try? cluster.psql(name, "SELECT hash FROM contents")) ?? "").split(separator: "\n").map(String.init))
        }
        guard let db = try? Database(path: data + "/server.db") else { return [] }
        return Set((try? db.query("SELECT hash FROM contents") { $0.string(0) ?? "" }) ?? [])
    }

    /// How many blocks the server stores: block files, or with an object store the
    /// blocks it verified and recorded.
    func blockCount() -> Int {
        if seaweed != nil {
            guard let db = try? Database(path: data + "/server.db") else { return 0 }
            return (try? db.queryOne("SELECT count(*) FROM blocks", row: { Int($0.int64(0)) })) ?? 0
        }
        return blockFileCount()
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

    var mountArguments: [String] { ["--server", url, "--token-file", tokenFile] }
}
