import Client
import Crypto
import Foundation
import Protocol
@testable import Server
import Testing
import TestSupport
import TestTraits
#if canImport(Glibc)
import Glibc
#endif

/// What an operator watches and sets on `vdrive serve`: the access log (read from a real
/// server's stderr), `GET /metrics` (parsed, its counters moving with known requests),
/// who may read the metrics, `vdrive serve check`'s quota lines and the limits options.
@Suite(.tags(.endToEnd), .serialized) struct OperationsTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible {
        case embedded, scaled
        var testDescription: String { rawValue }
    }

    /// A `vdrive serve` process on `backend` with its stderr in a file, and a device.
    final class LoggedServer: @unchecked Sendable { // set up once, then only read
        let dir = TemporaryDirectory()
        let store: ScaledStoreTests.Store?
        let process: ServerProcess
        let client: WorkspaceClient
        let errors: String

        init(_ backend: Backend, extra: [String] = []) throws {
            store = backend == .scaled ? try ScaledStoreTests.Store() : nil
            errors = dir.path + "/stderr"
            do {
                let backends = try store?.scaledBackends()
                let database = backends.map { DatabaseLocation.postgres(connectionString: $0.database) }
                let token = try DeviceRegistry(dataDirectory: dir.path + "/data", database: database).add("phone")
                process = try ServerProcess(data: dir.path + "/data", extra: (backends?.options ?? []) + extra, errors: errors)
                client = WorkspaceClient(baseURL: process.base, token: token)
            } catch { store?.stop(); dir.remove(); throw error }
        }

        /// Stops the server (SIGTERM: its last lines are written) and returns its access lines.
        func stopAndReadLog() -> [String] {
            process.kill(SIGTERM)
            let text = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").map(String.init).filter { $0.hasPrefix("access ") }
        }

        func remove() {
            process.kill()
            store?.stop()
            dir.remove()
        }
    }

    /// A line's `key=value` pairs in order (values are bare in these tests).
    static func fields(_ line: String) -> [(String, String)] {
        line.split(separator: " ").dropFirst().map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }
    }

    static let keys = ["method", "route", "status", "in", "out", "ms", "device", "client", "end"]

    @Test(arguments: Backend.allCases) func accessLogHasALinePerRequestWithItsRouteNeverItsPath(_ backend: Backend) throws {
        let server = try LoggedServer(backend); defer { server.remove() }
        let health = try HTTPConnection().perform(method: "GET", url: server.process.base + "/v1/health", headers: [], body: .none)
        let f = TestFile(in: server.dir.path, size: 300_000, seed: 41)
        let fd = f.open(); defer { close(fd) }
        try server.client.uploadFile(fd: fd, size: f.size)
        try server.client.recordFile(FileRecord(path: "Camera Roll/a.jpg", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                captureDate: nil, mtime: 1, deviceSequence: 1))
        let missing = try HTTPConnection().perform(method: "GET", url: server.process.base + "/no/such/" + f.digest.hex, headers: [], body: .none)
        #expect(missing.status == 404)
        // The synced workspace's tree: its routes are named too, the node's id never.
        let folder = "0123456789abcdef0123456789abcdef"
        _ = try server.client.applyTreeChanges([.put(TreePut(id: folder, base: 0, parent: TreeNode.rootID, name: "Docs", kind: .folder, mtime: 0))])
        _ = try server.client.treePage(since: 0)
        _ = try server.client.nodeVersions(id: folder)
        let lines = server.stopAndReadLog()

        for line in lines {
            #expect(Self.fields(line).map(\.0) == Self.keys, "keys and their order are stable: \(line)")
            #expect(!line.contains(f.digest.hex) && !line.contains(f.content.hex), "a hash reached the log: \(line)")
            #expect(!line.contains("sig") && !line.contains("?"), "a query reached the log: \(line)")
        }
        let healthLine = try #require(lines.first { $0.contains("route=/v1/health") })
        #expect(healthLine == "access method=GET route=/v1/health status=200 in=0 out=\(health.body.count) ms=\(Self.fields(healthLine)[5].1) device=- client=127.0.0.1 end=sent")
        let plan = try #require(lines.first { $0.contains("route=/v1/uploads") })
        #expect(plan.contains("method=POST") && plan.contains(backend == .embedded ? "status=201" : "status=200") && plan.contains("device=phone"), "\(plan)")
        #expect(Int(Self.fields(plan)[3].1) ?? 0 > 0, "the plan's JSON body is counted in: \(plan)")
        let record = try #require(lines.first { $0.contains("route=/v1/files ") })
        #expect(record.contains("status=201") && record.contains("device=phone"))
        switch backend {
        case .embedded:
            // The block went to the presigned tus URL: its bytes in, the URL's device named.
            let patches = lines.filter { $0.contains("method=PATCH") }
            #expect(patches.allSatisfy { $0.contains("route=/v1/tus/{id} ") && $0.contains("device=phone") && $0.contains("status=204") }, "\(patches)")
            #expect(patches.map { Int64(Self.fields($0)[3].1) ?? 0 }.reduce(0, +) == f.size)
        case .scaled:
            let verify = try #require(lines.first { $0.contains("route=/v1/blocks/{hash}/verify") })
            #expect(verify.contains("status=201") && verify.contains("device=phone"))
        }
        #expect(lines.contains { $0.contains("route=other status=404") })
        #expect(lines.contains { $0.contains("method=POST route=/v1/tree/changes status=200") && $0.contains("device=phone") })
        #expect(lines.contains { $0.contains("method=GET route=/v1/tree status=200") })
        #expect(lines.contains { $0.contains("method=GET route=/v1/tree/nodes/{id}/versions status=200") })
        #expect(!lines.contains { $0.contains(folder) }, "a node id reached the log")
    }

    /// A connection that never completes its header is closed by the deadline (15 s; no
    /// 408: the socket is shut down) and still gets its line.
    @Test func aConnectionCutAtTheHeaderDeadlineIsLogged() throws {
        let server = try LoggedServer(.embedded); defer { server.remove() }
        let raw = try RawConnection(port: server.process.port)
        raw.send(Array("GET /v1/health HTTP/1.1\r\nHost: x\r\n".utf8))
        // The server closes it: the read ends, without a reply, within the deadline and a margin.
        #expect(raw.reply(timeout: 25) == nil)
        let lines = server.stopAndReadLog()
        let cut = try #require(lines.first { $0.contains("end=header_deadline") }, "\(lines)")
        #expect(cut.hasPrefix("access method=- route=- status=0 in=0 out=0 ms="))
        #expect(cut.hasSuffix("device=- client=127.0.0.1 end=header_deadline"))
        #expect(Double(Self.fields(cut)[5].1) ?? 0 >= 14_000)
    }

    @Test func accessLogOffWritesNoLine() throws {
        let server = try LoggedServer(.embedded, extra: ["--access-log", "off"]); defer { server.remove() }
        #expect(try HTTPConnection().perform(method: "GET", url: server.process.base + "/v1/health", headers: [], body: .none).status == 200)
        // Stopped: everything it would write is written.
        #expect(server.stopAndReadLog().isEmpty)
        #expect((try? String(contentsOfFile: server.errors, encoding: .utf8))?.isEmpty ?? true)
    }

    // MARK: metrics

    /// `GET /metrics` parsed: each sample line as `name{labels}` → value; every family
    /// has its HELP and TYPE before its samples.
    static func scrape(_ base: String, headers: [String] = []) throws -> [String: Double] {
        let reply = try HTTPConnection().perform(method: "GET", url: base + "/metrics", headers: headers, body: .none)
        guard reply.status == 200 else { throw TestFailure("GET /metrics: \(reply.status) \(reply.text)") }
        #expect(reply.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
        var samples: [String: Double] = [:]
        var typed: Set<String> = []
        for line in reply.text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") { typed.insert(String(line.split(separator: " ")[2])); continue }
            if line.hasPrefix("#") { continue }
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                throw TestFailure("not a sample line: \(line)")
            }
            let key = String(line[..<space])
            let family = String(key.prefix { $0 != "{" })
            let base = ["_bucket", "_sum", "_count"].reduce(family) { $0.hasSuffix($1) && typed.contains(String($0.dropLast($1.count))) ? String($0.dropLast($1.count)) : $0 }
            #expect(typed.contains(base), "\(family) has no TYPE line before it")
            samples[key] = value
        }
        return samples
    }

    @Test(arguments: Records.all) func metricsCountKnownRequests(_ records: Records) throws {
        let s = try TestServer(records: records) { c in
            c.gcInterval = 1
            c.gcGrace = 0
        }
        defer { s.stop() }
        let before = try Self.scrape(s.base)
        #expect(abs((before["process_start_time_seconds"] ?? 0) - Date().timeIntervalSince1970) < 600)
        for name in ["vdrive_http_open_connections", "vdrive_http_held_requests", "vdrive_uploads_in_flight", "vdrive_upload_hashers_open",
                     "vdrive_buffered_body_bytes", "vdrive_gc_runs_total", "vdrive_gc_blocks_collected_total", "vdrive_gc_bytes_freed_total"] {
            #expect(before[name] != nil, "\(name) missing")
        }
        #expect((before["vdrive_http_open_connections"] ?? 0) >= 1, "the scrape's own connection is open")

        for _ in 0..<3 { #expect(try s.send("GET", "/v1/health", auth: false).status == 200) }
        #expect(try s.send("GET", "/v1/watermark", auth: false).status == 401)
        // A block PUT whole (nothing names it: the collection takes it), and a stored file's block read.
        let g = TestFile(in: s.dir.path, size: 100_000, seed: 46)
        #expect(try s.send("PUT", "/v1/blocks/\(g.digest.hex)", headers: ["Expect:"], body: .bytes(g.bytes)).status == 201)
        let f = TestFile(in: s.dir.path, size: 200_000, seed: 42)
        try s.store(f, at: "a.bin")
        #expect(try s.send("GET", "/v1/blocks/\(f.digest.hex)").status == 200)
        let after = try Self.scrape(s.base)

        func moved(_ key: String) -> Double { (after[key] ?? 0) - (before[key] ?? 0) }
        #expect(moved("vdrive_http_requests_total{route=\"/v1/health\",status=\"200\"}") == 3)
        #expect(moved("vdrive_http_requests_total{route=\"/v1/watermark\",status=\"401\"}") == 1)
        #expect(moved("vdrive_http_requests_total{route=\"/v1/blocks/{hash}\",status=\"201\"}") == 1)
        #expect(moved("vdrive_http_requests_total{route=\"/v1/blocks/{hash}\",status=\"200\"}") == 1)
        #expect(moved("vdrive_http_requests_total{route=\"/metrics\",status=\"200\"}") == 1, "the first scrape")
        #expect(moved("vdrive_http_request_bytes_total{route=\"/v1/blocks/{hash}\"}") == Double(g.size))
        #expect(moved("vdrive_http_request_bytes_total{route=\"/v1/tus/{id}\"}") == Double(f.size))
        #expect(moved("vdrive_http_response_bytes_total{route=\"/v1/blocks/{hash}\"}") >= Double(f.size))
        #expect(moved("vdrive_http_request_duration_seconds_count{route=\"/v1/health\"}") == 3)
        #expect(after["vdrive_http_request_duration_seconds_bucket{route=\"/v1/health\",le=\"+Inf\"}"] == after["vdrive_http_request_duration_seconds_count{route=\"/v1/health\"}"])
        #expect(moved("vdrive_http_request_duration_seconds_sum{route=\"/v1/health\"}") > 0)
        #expect(after.keys.allSatisfy { !$0.contains(f.digest.hex) }, "a label carries a hash")

        // The periodic collection (every second, no grace) removes the bare block and a deleted backup's.
        let configuration = s.server.configuration
        try BackupAdmin(dataDirectory: configuration.dataDirectory, database: configuration.database).delete(device: "test-device", path: "a.bin")
        let deadline = Date().addingTimeInterval(30)
        var collected = try Self.scrape(s.base)
        while collected["vdrive_gc_blocks_collected_total"] ?? 0 < 2, Date() < deadline {
            usleep(200_000)
            collected = try Self.scrape(s.base)
        }
        #expect(collected["vdrive_gc_blocks_collected_total"] == 2)
        #expect(collected["vdrive_gc_bytes_freed_total"] == Double(f.size + g.size))
        #expect(collected["vdrive_gc_runs_total"] ?? 0 >= 1)
    }

    @Test func metricsNeedTheTokenWhenOneIsSet() throws {
        let token = "m3tr1cs-" + Hex.encode(SecureRandom.bytes(12))
        let s = try TestServer { $0.metricsToken = token }
        defer { s.stop() }
        let none = try s.send("GET", "/metrics", auth: false)
        #expect(none.status == 401)
        #expect(none.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
        #expect(try s.send("GET", "/metrics", auth: true).status == 401, "a device token is not the metrics token")
        #expect(try s.send("GET", "/metrics", headers: ["Authorization: Bearer \(token)x"], auth: false).status == 401)
        #expect(try s.send("GET", "/metrics", headers: ["Authorization: Bearer \(token.dropLast())"], auth: false).status == 401)
        // A request is counted when libmicrohttpd reports it complete, just after its reply went out.
        var refused: Double?
        try eventually("the four refusals counted: \(refused.map { "\($0)" } ?? "none")", within: 10) {
            refused = try Self.scrape(s.base, headers: ["Authorization: Bearer \(token)"])["vdrive_http_requests_total{route=\"/metrics\",status=\"401\"}"]
            return refused ?? 0 >= 4
        }
        #expect(refused == 4)
        #expect(try s.send("POST", "/metrics", auth: false).status == 405)
    }

    /// Without a token the metrics answer loopback clients only: asked through this
    /// machine's own non-loopback address, 403 (skipped where the machine has none).
    @Test func metricsWithoutATokenAreForLoopbackOnly() throws {
        let s = try TestServer { $0.host = "0.0.0.0" }
        defer { s.stop() }
        let port = s.server.port
        #expect(try Self.scrape("http://127.0.0.1:\(port)")["vdrive_http_open_connections"] != nil)
        guard let address = Self.nonLoopbackAddress() else {
            print("OperationsTests.metricsWithoutATokenAreForLoopbackOnly: no non-loopback IPv4 address here; the 403 is not checked")
            return
        }
        let outside = try HTTPConnection().perform(method: "GET", url: "http://\(address):\(port)/metrics", headers: [], body: .none)
        #expect(outside.status == 403, "\(outside.text)")
        #expect(outside.text.contains("--metrics-token"))
        #expect(try HTTPConnection().perform(method: "GET", url: "http://\(address):\(port)/v1/health", headers: [], body: .none).status == 200)
    }

    static func nonLoopbackAddress() -> String? {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return nil }
        defer { freeifaddrs(list) }
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let sa = entry.pointee.ifa_addr, sa.pointee.sa_family == sa_family_t(AF_INET) else { continue }
            var text = [CChar](repeating: 0, count: 64)
            let address = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            var copy = address
            guard inet_ntop(AF_INET, &copy, &text, socklen_t(text.count)) != nil else { continue }
            let string = text.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            if !string.hasPrefix("127.") { return string }
        }
        return nil
    }

    /// A body that brings less than its minimum per window is cut; the metrics count it,
    /// and a connection cut waiting for its header too.
    @Test func connectionsCutByADeadlineAreCounted() throws {
        let limits = ConnectionLimits(perAddress: 64, total: 256, headerSeconds: 1, idleSeconds: 30, bodyWindowSeconds: 1, minimumBodyBytes: 1 << 20)
        let s = try TestServer(connectionLimits: limits)
        defer { s.stop() }
        let slowHeader = try RawConnection(port: s.server.port)
        slowHeader.send(Array("GET /v1/health HTTP/1.1\r\n".utf8))
        let slowBody = try RawConnection(port: s.server.port)
        let f = TestFile(in: s.dir.path, size: 100_000, seed: 43)
        slowBody.send(Array("PUT /v1/blocks/\(f.digest.hex) HTTP/1.1\r\nHost: x\r\n\(s.auth)\r\nContent-Length: \(f.size)\r\n\r\n".utf8) + Array(f.bytes.prefix(1000)))
        let deadline = Date().addingTimeInterval(20)
        var samples = try Self.scrape(s.base)
        while (samples["vdrive_http_connections_cut_total{reason=\"header\"}"] ?? 0) < 1 || (samples["vdrive_http_connections_cut_total{reason=\"body\"}"] ?? 0) < 1,
              Date() < deadline {
            usleep(200_000)
            samples = try Self.scrape(s.base)
        }
        #expect(samples["vdrive_http_connections_cut_total{reason=\"header\"}"] == 1)
        #expect(samples["vdrive_http_connections_cut_total{reason=\"body\"}"] == 1)
        #expect(samples["vdrive_http_request_bytes_total{route=\"/v1/blocks/{hash}\"}"] == 1000, "the bytes it brought are counted")
    }

    // MARK: the command line

    @Test(arguments: Records.all) func serveCheckReportsTheUsageAgainstTheQuota(_ records: Records) throws {
        let s = try TestServer(records: records) { $0.quota = 1 << 30 }
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 300_000, seed: 44)
        try s.store(f, at: "a.bin")
        let configuration = s.server.configuration
        let base = ["serve", "check", "--data", configuration.dataDirectory] + Records.arguments(configuration.database)
        let recorded = try runCommand(vdriveBinary(), base)
        #expect(recorded.status == 0, "\(recorded.stderr)")
        #expect(recorded.stdout.contains("usage: 1 block(s), 300 KB stored"), "\(recorded.stdout)")
        #expect(recorded.stdout.contains("quota: 1.1 GB (the quota the server last started with)"))
        #expect(recorded.stdout.contains("quota: within, 0.0% used"))
        let over = try runCommand(vdriveBinary(), base + ["--quota", "100K"])
        #expect(over.status == 0, "over the quota the server still starts: \(over.stderr)")
        #expect(over.stdout.contains("quota: 102 KB (--quota)"))
        #expect(over.stdout.contains("quota: over by 198 KB"), "\(over.stdout)")
        let within = try runCommand(vdriveBinary(), base + ["--quota", "1M"])
        #expect(within.stdout.contains("quota: within, 28.6% used, 749 KB free"), "\(within.stdout)")
        let bad = try runCommand(vdriveBinary(), base + ["--quota", "lots"])
        #expect(bad.status == 64)
        #expect(bad.stderr.contains("--quota must be a size"))
    }

    @Test func limitsOptionsAreCheckedAndApplied() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let data = ["serve", "--data", dir.path + "/data", "--listen", "127.0.0.1:0"]
        let refused: [([String], String)] = [
            (["--max-open-hashers", "0"], "--max-open-hashers must be a whole number from 1 to 4096, got '0'"),
            (["--max-open-hashers", "5000"], "--max-open-hashers must be a whole number from 1 to 4096"),
            (["--max-uploads-per-plan", "x"], "--max-uploads-per-plan must be a whole number from 1 to 262144, got 'x'"),
            (["--max-uploads-per-device", "-1"], "--max-uploads-per-device must be a whole number from 1 to 16777216, got '-1'"),
            (["--max-uploads-per-plan", "100", "--max-uploads-per-device", "50"], "must be at least the uploads per plan limit (100)"),
            (["--body-budget", "100K"], "--body-budget must be a size from 1M to 1T such as 256M or 2G, got '100K'"),
            (["--body-budget", "99999999999T"], "--body-budget must be a size"),
            (["--access-log", "syslog"], "--access-log must be off or stderr, got 'syslog'"),
        ]
        for (options, message) in refused {
            let r = try runCommand(vdriveBinary(), data + options)
            #expect(r.status == 64, "\(options): \(r.stderr)")
            #expect(r.stderr.contains(message), "\(options): \(r.stderr)")
        }
        let missing = try runCommand(vdriveBinary(), data + ["--metrics-token", dir.path + "/none"])
        #expect(missing.status == 66)
        #expect(missing.stderr.contains("cannot read the metrics token file \(dir.path)/none"))
        writeFile(dir.path + "/short", Array("abc\n".utf8))
        let short = try runCommand(vdriveBinary(), data + ["--metrics-token", dir.path + "/short"])
        #expect(short.status == 64)
        #expect(short.stderr.contains("must be one word of 16 characters or more"))
        let help = try runCommand(vdriveBinary(), ["serve", "--help"])
        for option in ["--max-open-hashers", "--max-uploads-per-plan", "--max-uploads-per-device", "--body-budget", "--access-log", "--metrics-token"] {
            #expect(help.stdout.contains(option), "\(option) is not in --help")
        }

        // Accepted values start a server that applies them: a plan over the per-plan limit is 413.
        let token = String(repeating: "t", count: 20)
        writeFile(dir.path + "/token", Array((token + "\n").utf8))
        let server = try ServerProcess(data: dir.path + "/data", extra: ["--max-open-hashers", "2", "--max-uploads-per-plan", "1", "--max-uploads-per-device", "4",
                                                                        "--body-budget", "8M", "--access-log", "off", "--metrics-token", dir.path + "/token"])
        defer { server.kill(SIGTERM) }
        let deviceToken = try DeviceRegistry(dataDirectory: dir.path + "/data", database: nil).add("phone")
        let client = WorkspaceClient(baseURL: server.base, token: deviceToken)
        let two = TestFile(in: dir.path, size: Blocks.size + 10, seed: 45)
        #expect(throws: ClientError.self) { _ = try client.createUpload(content: two.content, size: two.size, blocks: two.manifest.blocks) }
        let plan = try HTTPConnection().perform(method: "POST", url: server.base + "/v1/uploads", headers: ["Authorization: Bearer \(deviceToken)", "Content-Type: application/json", "Expect:"],
                                                body: .bytes(Array("{\"content\":\"\(two.content.hex)\",\"size\":\(two.size),\"blocks\":[\"\(two.manifest.blocks[0].hex)\",\"\(two.manifest.blocks[1].hex)\"]}".utf8)))
        #expect(plan.status == 413, "\(plan.text)")
        #expect(plan.text.contains("may start at most 1"))
        #expect(try HTTPConnection().perform(method: "GET", url: server.base + "/metrics", headers: [], body: .none).status == 401)
        #expect(try Self.scrape(server.base, headers: ["Authorization: Bearer \(token)"])["vdrive_http_requests_total{route=\"/v1/uploads\",status=\"413\"}"] == 2)
    }
}
