import Client
import Crypto
import Foundation
@_exported import TestSupport
@_exported import TestTraits
import Protocol
import Server
import Testing
import Storage

/// An in-process server on a free loopback port with one device, in a fresh folder.
/// `stop()` must be called on every path (use `defer`).
final class TestServer: @unchecked Sendable { // immutable after init; the server itself is Sendable
    let dir: TemporaryDirectory
    let server: WorkspaceServer
    let token: String
    let client: WorkspaceClient
    let raw: HTTPConnection

    /// Where the records are (a fresh database per server for PostgreSQL).
    let database: DatabaseLocation?

    init(dataDirectory: String? = nil, uploadExpiry: Int64 = 7 * 86400, store: BlockStoreChoice = .folder, records: Records = .sqlite,
         cluster: PostgresCluster? = nil, limits: ServerLimits = ServerLimits(), connectionLimits: ConnectionLimits = ConnectionLimits(),
         tls: TLSConfiguration? = nil, caFile: String? = nil, configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
        dir = TemporaryDirectory()
        let data = dataDirectory ?? dir.path + "/data"
        database = try records.freshLocation(in: cluster)
        token = try DeviceRegistry(dataDirectory: data, database: database).add("test-device")
        var configuration = ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0, uploadExpiry: uploadExpiry, store: store, database: database)
        configuration.limits = limits
        configuration.connectionLimits = connectionLimits
        configuration.tls = tls
        // The access log's lines would bury the test's own output; OperationsTests reads them from a process.
        configuration.accessLog = .off
        configure(&configuration)
        server = try WorkspaceServer(configuration)
        client = WorkspaceClient(baseURL: server.baseURL, token: token, caFile: caFile)
        raw = HTTPConnection(caFile: caFile)
    }

    var base: String { server.baseURL }
    var auth: String { "Authorization: Bearer \(token)" }
    var blobRoot: String { server.configuration.dataDirectory + "/blobs" }

    func stop() {
        server.stop()
        dir.remove()
    }

    /// Sends a raw request (for the error cases the typed client never produces).
    func send(_ method: String, _ pathOrURL: String, headers: [String] = [], body: RequestBodySource = .none, auth: Bool = true) throws -> HTTPResult {
        let url = pathOrURL.hasPrefix("http") ? pathOrURL : base + pathOrURL
        return try raw.perform(method: method, url: url, headers: (auth ? [self.auth] : []) + headers, body: body)
    }

    func json(_ method: String, _ path: String, _ text: String) throws -> HTTPResult {
        try send(method, path, headers: ["Content-Type: application/json", "Expect:"], body: .bytes(Array(text.utf8)))
    }

    /// A new test file, its blocks uploaded with the typed client (not yet recorded).
    func uploaded(size: Int, seed: UInt64) throws -> TestFile {
        let f = TestFile(in: dir.path, size: size, seed: seed)
        let fd = f.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: f.size)
        return f
    }

    /// Records `f` at `path` with its block list.
    @discardableResult
    func record(_ f: TestFile, at path: String, sequence: Int64 = 1, mtime: Int64 = 1) throws -> FileRecord {
        try client.recordFile(FileRecord(path: path, hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                         captureDate: nil, mtime: mtime, deviceSequence: sequence))
    }

    /// Uploads and records `f`.
    func store(_ f: TestFile, at path: String) throws {
        let fd = f.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: f.size)
        try record(f, at: path)
    }

    /// The first block upload of `f`'s plan (tus-level tests use one-block files).
    func ticket(_ f: TestFile) throws -> BlockTicket {
        guard case .blocks(let tickets, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks),
              let first = tickets.first else { throw TestFailure("expected a block to upload") }
        return first
    }

    /// Flips one byte of a stored block's file (damage in the server's store).
    func damageStoredBlock(_ f: TestFile) {
        let path = blobRoot + "/" + f.digest.hex.prefix(2) + "/" + f.digest.hex
        chmod(path, 0o600)
        var bytes = f.bytes
        bytes[7] ^= 1
        writeFile(path, bytes)
    }

    /// Number of block files in the store.
    func blockCount() -> Int { countBlockFiles(blobRoot) }

    /// True when the server holds block `d` (HEAD /v1/blocks/<hash>: 200, or with an
    /// object store 307 to it).
    func hasBlock(_ d: SHA256Digest) throws -> Bool { [200, 307].contains(try send("HEAD", "/v1/blocks/\(d.hex)").status) }
}

/// The records back ends the server tests run against: the same test, each back end
/// an argument (`@Test(arguments: Records.all)`).
enum Records: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    static let all = Records.allCases
    var testDescription: String { rawValue }

    /// nil for SQLite in the data folder; a fresh database of the test cluster (or of
    /// `cluster`) for PostgreSQL.
    func freshLocation(in own: PostgresCluster? = nil) throws -> DatabaseLocation? {
        switch self {
        case .sqlite: return nil
        case .postgres:
            guard let cluster = own ?? PostgresCluster.shared else { throw TestFailure("the test PostgreSQL cluster did not start (see stderr); Tests/run installs postgresql") }
            return .postgres(connectionString: try cluster.newDatabase())
        }
    }

    /// The `vdrive serve` options naming a location.
    static func arguments(_ location: DatabaseLocation?) -> [String] {
        guard case .postgres(let url) = location else { return [] }
        return ["--database", url]
    }
}

/// Runs `body` with a descriptor of /dev/null (downloads checked but not kept).
func discarding<T>(_ body: (Int32) throws -> T) throws -> T {
    let fd = open("/dev/null", O_WRONLY)
    defer { close(fd) }
    return try body(fd)
}

/// Number of block files under a store root (`<root>/ab/<hex>`).
func countBlockFiles(_ root: String) -> Int {
    let folders = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
    return folders.filter { $0.count == 2 }.reduce(0) { $0 + ((try? FileManager.default.contentsOfDirectory(atPath: root + "/" + $1).count) ?? 0) }
}

/// A test file: pseudo-random bytes (deterministic per seed) or given bytes, with its
/// SHA-256 (`digest`: the block hash of a one-block file) and its manifest.
struct TestFile {
    let path: String
    let size: Int64
    let digest: SHA256Digest
    let manifest: BlockManifest
    var content: SHA256Digest { manifest.content }

    init(in dir: String, size: Int, seed: UInt64 = 1) {
        self.init(in: dir, name: "file-\(seed)-\(size)", bytes: randomBytes(size, seed: seed))
    }

    init(in dir: String, name: String, bytes: [UInt8]) {
        path = dir + "/" + name
        writeFile(path, bytes)
        size = Int64(bytes.count)
        digest = SHA256Hasher.digest(bytes)
        let hasher = ContentHasher()
        bytes.withUnsafeBytes { hasher.update($0) }
        let (content, blocks) = hasher.finish()
        manifest = BlockManifest(content: content, size: size, blocks: blocks)
    }

    func open() -> Int32 { Glibc.open(path, O_RDONLY) }
    var bytes: [UInt8] { Array(FileManager.default.contents(atPath: path)!) }
}


/// Writes a file with plain system calls (Foundation's atomic writes leave a
/// `TemporaryDirectory.*` folder behind in /tmp on Linux).
func writeFile(_ path: String, _ bytes: [UInt8]) {
    let fd = try! FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    defer { FileIO.close(fd) }
    bytes.withUnsafeBytes { try! FileIO.pwrite(fd, $0, at: 0) }
}

/// The built `vdrive` binary next to the test bundle (`swift build` builds it with the tests).
func vdriveBinary() -> String {
    let here = URL(fileURLWithPath: #filePath)  // Tests/ServerTests/Support.swift
    let root = here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    for config in ["debug", "release"] {
        let p = "\(root)/.build/\(config)/vdrive"
        if FileManager.default.isExecutableFile(atPath: p) { return p }
    }
    return "\(root)/.build/debug/vdrive"
}

/// A real `vdrive serve` process on a free port. `stop()`/`kill()` on every path.
final class ServerProcess: @unchecked Sendable { // used from one test at a time
    let process = Process()
    let output = Pipe()
    private(set) var port: UInt16 = 0
    let data: String

    /// `errors`: a file that receives the server's stderr (its access log); else the test's stderr.
    init(data: String, extra: [String] = [], errors: String? = nil) throws {
        self.data = data
        process.executableURL = URL(fileURLWithPath: vdriveBinary())
        // Without a file for its log, its errors go to the test's stderr, its access log nowhere.
        let quiet = errors == nil && !extra.contains("--access-log") ? ["--access-log", "off"] : []
        process.arguments = ["serve", "--data", data, "--listen", "127.0.0.1:0"] + quiet + extra
        process.standardOutput = output
        if let errors {
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: errors)
        } else {
            process.standardError = FileHandle.standardError
        }
        try process.run()
        // The first line says where it listens.
        var line = [UInt8]()
        let handle = output.fileHandleForReading
        while true {
            let byte = handle.readData(ofLength: 1)
            if byte.isEmpty { break }
            if byte.first == 10 { break }
            line.append(byte.first!)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let range = text.range(of: "127.0.0.1:"), let p = UInt16(text[range.upperBound...].prefix { $0.isNumber }) else {
            process.terminate()
            process.waitUntilExit()
            throw TestFailure("vdrive serve did not print its address; got '\(text)'")
        }
        port = p
    }

    var base: String { "http://127.0.0.1:\(port)" }

    func kill(_ signal: Int32 = SIGKILL) {
        if process.isRunning { Glibc.kill(process.processIdentifier, signal) }
        process.waitUntilExit()
    }

    func rest() -> String {
        String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Runs a command, returns (status, stdout, stderr).
func run(_ executable: String, _ arguments: [String]) throws -> (Int32, String, String) {
    let r = try runCommand(executable, arguments)
    return (r.status, r.stdout, r.stderr)
}

extension HTTPResult {
    var text: String { String(decoding: body, as: UTF8.self) }
    var error: ErrorResponse? { try? WireJSON.decode(ErrorResponse.self, from: body) }
}
