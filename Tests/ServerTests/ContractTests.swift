import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

/// The OpenAPI document (`GET /v1/openapi.json`) is exact, and stays so: schemathesis,
/// a property-based fuzzer, drives every operation from the document against a real
/// `vdrive serve`, with and without a device token, and fails on a 5xx, a status code
/// or header or body the document does not declare, a schema-valid request refused, a
/// schema-invalid one accepted, an undeclared method not answered 405 with `Allow`, and
/// an operation that ignores its authentication. The rules a schema cannot state (a
/// block list that must hash to its content hash, …) are in `schemathesis.toml`.
///
/// The seed and the number of examples are fixed, so a run is repeatable; a failure
/// prints schemathesis's report with a `curl` line per case. Tests/run installs
/// schemathesis; without it this test fails (it is part of the suite, not optional).
@Suite(.tags(.endToEnd), .serialized) struct ContractTests {
    /// Examples per operation and phase: enough to reach every parameter's bounds (the
    /// coverage phase tries each boundary regardless), few enough for ~20 s a run.
    static let examples = 25
    static let seed = 20261130

    /// With and without a token against the embedded server, with a token against a
    /// server keeping blocks in a real SeaweedFS (presigned S3 plans, verification,
    /// redirects to the store), and with a token against one keeping its records in
    /// PostgreSQL: one document for all.
    @Test(arguments: [(true, false, Records.sqlite), (false, false, .sqlite), (true, true, .sqlite), (true, false, .postgres)])
    func everyOperationKeepsTheDocument(withToken: Bool, scaled: Bool, records: Records) throws {
        let schemathesis = try Self.schemathesis()
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let database = try records.freshLocation()
        let token = try DeviceRegistry(dataDirectory: data, database: database).add("contract")
        let weed = scaled ? try SeaweedFS(folder: dir.path + "/seaweed") : nil
        defer { weed?.stop() }
        var storeArguments: [String] = []
        if let weed {
            writeFile(dir.path + "/s3-credentials", Array("aws_access_key_id = \(weed.accessKey)\naws_secret_access_key = \(weed.secretKey)\n".utf8))
            storeArguments = ["--store", weed.storeURL + "&credentials=" + dir.path + "/s3-credentials"]
        }
        let server = try ServerProcess(data: data, extra: storeArguments + Records.arguments(database))
        defer { server.kill(SIGTERM) }
        let stored = try Self.store(server: server, token: token, in: dir.path)

        var arguments = ["run", server.base + "/v1/openapi.json", "--checks", "all", "--workers", "1",
                         "--seed", String(Self.seed), "--max-examples", String(Self.examples),
                         "--request-timeout", "10", "--no-color"]
        if withToken { arguments += ["--header", "Authorization: Bearer \(token)"] }
        let result = try runCommand(schemathesis, arguments, environment: stored, directory: Self.repositoryRoot)
        #expect(result.status == 0, """
            schemathesis found the server and its OpenAPI document disagreeing (\(withToken ? "with" : "without") a token\(scaled ? ", blocks in SeaweedFS" : "")\(records == .postgres ? ", records in PostgreSQL" : "")), exit status \(result.status). \
            Reproduce by hand: see Docs/protocol.md, "The contract test".
            \(result.stdout)
            \(result.stderr)
            """)
        #expect(server.process.isRunning, "vdrive serve died during the run")
    }

    /// The document states the path rule as a regular expression; the server checks it in
    /// code (`Validation.path`). The two agree on the cases a fuzzer rarely draws.
    @Test func thePathPatternIsWhatTheServerChecks() throws {
        let s = try TestServer()
        defer { s.stop() }
        let doc = try JSONSerialization.jsonObject(with: Data(s.send("GET", "/v1/openapi.json", auth: false).body)) as? [String: Any]
        let schemas = (doc?["components"] as? [String: Any])?["schemas"] as? [String: Any]
        guard let pattern = (schemas?["Path"] as? [String: Any])?["pattern"] as? String else { throw TestFailure("no Path pattern in the document") }
        let regex = try NSRegularExpression(pattern: pattern)
        let paths = ["a", "a/b", ".a", "..a", "...", "a.", "a/.b/c..", "Camera Roll/IMG 1.jpg", "é/日本",
                     "", "/a", "a/", "a//b", ".", "..", "a/./b", "a/../b", "./a", "a/..", "a\u{0}b"]
        for path in paths {
            let documented = regex.firstMatch(in: path, range: NSRange(path.startIndex..., in: path)) != nil
            let body = WireJSON.encode(FileRecord(path: path, hash: SHA256Hasher.digest("x").hex, size: 1, captureDate: nil, mtime: 1, deviceSequence: 1))
            let r = try s.send("POST", "/v1/files", headers: ["Content-Type: application/json", "Expect:"], body: .bytes(body))
            let refused = r.status == 400 && r.error?.field == "path"
            #expect(documented == !refused, "path '\(path)': the document says \(documented ? "valid" : "invalid"), the server answered \(r.status) \(r.text)")
        }
    }

    /// Something for the fuzzer to find (Tests/contract/hooks.py pins it into half the
    /// valid cases): a stored block, a recorded content of it, and a presigned upload of
    /// another block. Returned as the environment the hooks read.
    static func store(server: ServerProcess, token: String, in folder: String) throws -> [String: String] {
        let client = WorkspaceClient(baseURL: server.base, token: token)
        let stored = TestFile(in: folder, name: "stored", bytes: Array("hello\n".utf8))
        let fd = stored.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: stored.size)
        try client.recordFile(FileRecord(path: "Camera Roll/stored.txt", hash: stored.content.hex, size: stored.size,
                                         blocks: stored.manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: 1))
        let pending = TestFile(in: folder, size: 1000, seed: 5)
        guard case .blocks(let tickets, _) = try client.createUpload(content: pending.content, size: pending.size, blocks: pending.manifest.blocks),
              let ticket = tickets.first, let url = URLComponents(string: ticket.url) else {
            throw TestFailure("expected a presigned upload for a new block")
        }
        // A scaled server has no tus uploads to pin (its plan is presigned S3 PUTs).
        guard ticket.kind == .tus else {
            return ["VDRIVE_CONTRACT_BLOCK": stored.digest.hex, "VDRIVE_CONTRACT_CONTENT": stored.content.hex]
        }
        let query = Dictionary((url.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { a, _ in a })
        let upload = [url.path.split(separator: "/").last.map(String.init) ?? ""] + ["hash", "size", "expires", "device", "sig"].map { query[$0] ?? "" }
        return ["VDRIVE_CONTRACT_BLOCK": stored.digest.hex, "VDRIVE_CONTRACT_CONTENT": stored.content.hex,
                "VDRIVE_CONTRACT_UPLOAD": upload.joined(separator: " ")]
    }

    /// The folder with Package.swift and schemathesis.toml (schemathesis reads its
    /// configuration, and the hooks it names, from the current folder).
    static var repositoryRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    /// The `schemathesis` program on PATH (or where `pip install --user` puts it).
    static func schemathesis() throws -> String {
        let env = ProcessInfo.processInfo.environment
        var folders = (env["PATH"] ?? "/usr/local/bin:/usr/bin").split(separator: ":").map(String.init)
        if let home = env["HOME"] { folders.append(home + "/.local/bin") }
        for folder in folders where FileManager.default.isExecutableFile(atPath: folder + "/schemathesis") {
            return folder + "/schemathesis"
        }
        throw TestFailure("schemathesis is not installed, and the contract test needs it: run Tests/run (it installs it), or 'python3 -m pip install schemathesis'")
    }
}
