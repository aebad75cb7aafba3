import Client
import Crypto
import Foundation
import Protocol
import Server
import Synchronization
import Testing

/// The scaled records under faults: PostgreSQL restarted or stopped mid-upload (on a
/// cluster of the test's own), and two `vdrive serve` processes sharing one PostgreSQL
/// database and one data folder.
@Suite(.tags(.endToEnd), .serialized, .enabled(if: PostgresCluster.isInstalled)) struct PostgresFaultTests {
    /// `pg_ctl restart` mid-upload: the server reconnects and the upload goes on. While
    /// PostgreSQL is down a request gets 503 (with Retry-After), and the same request
    /// succeeds once it is back.
    @Test func databaseRestartedMidUpload() throws {
        // A cluster of its own: restarting the shared one would cut other tests' connections.
        let cluster = try PostgresCluster()
        defer { cluster.stop() }
        let s = try TestServer(records: .postgres, cluster: cluster)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 3 * Blocks.size + 1000, seed: 301)
        let fd = f.open()
        defer { close(fd) }
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected an upload plan")
        }
        try #require(tickets.count == 4)
        #expect(try s.client.patch(url: tickets[0].url, offset: 0, fd: fd, fileOffset: 0, length: Int64(Blocks.size)) == Int64(Blocks.size))
        #expect(try s.client.patch(url: tickets[1].url, offset: 0, fd: fd, fileOffset: Int64(Blocks.size), length: 1 << 20) == 1 << 20)

        try cluster.restart()
        // Every pooled connection died with the server: the next call replaces them.
        #expect(try s.client.uploadOffset(url: tickets[1].url) == 1 << 20)
        #expect(try s.client.patch(url: tickets[1].url, offset: 1 << 20, fd: fd, fileOffset: Int64(Blocks.size) + (1 << 20), length: 1 << 20) == 2 << 20)

        try cluster.stopServer()
        do {
            let down = try s.send("HEAD", tickets[1].url)
            #expect(down.status == 503)
            #expect(down.headers["retry-after"] == "2")
            let plan = try s.json("POST", "/v1/uploads", "{\"content\":\"\(f.content.hex)\",\"size\":\(f.size),\"blocks\":[\(f.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ","))]}")
            #expect(plan.status == 503)
            #expect(plan.error?.error == "unavailable")
            #expect(plan.error?.message.contains("unavailable") == true)
        }
        try cluster.startServer()

        // The client's own resume (plan, HEAD, PATCH the rest) finishes it; the finished block is not sent again.
        guard case .blocks(let rest, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected an upload plan")
        }
        #expect(rest.map(\.index) == [1, 2, 3])
        #expect(rest.first?.offset == 2 << 20)
        try s.client.uploadFile(fd: fd, size: f.size)
        try s.record(f, at: "Camera Roll/restart.mov")
        #expect(try s.client.listFiles(prefix: "Camera Roll/").map(\.hash) == [f.content.hex])
        let out = TestFile(in: s.dir.path, name: "down", bytes: [])
        let wfd = open(out.path, O_WRONLY | O_TRUNC)
        defer { close(wfd) }
        #expect(try s.client.download(content: f.content, to: wfd) == f.size)
        #expect(FileManager.default.contents(atPath: out.path) == FileManager.default.contents(atPath: f.path))
    }

    /// Two server processes on one database and one data folder; the device alternates
    /// between them, one is killed (SIGKILL) in the middle of a PATCH, and the device
    /// finishes through the other without sending finished blocks again.
    @Test func twoServersOneDatabaseKillOneMidUpload() throws {
        guard let cluster = PostgresCluster.shared else { throw TestFailure("no cluster") }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let url = try cluster.newDatabase()
        let database = DatabaseLocation.postgres(connectionString: url)
        let token = try DeviceRegistry(dataDirectory: data, database: database).add("phone")
        let a = try ServerProcess(data: data, extra: ["--database", url])
        defer { a.kill() }
        let b = try ServerProcess(data: data, extra: ["--database", url])
        defer { b.kill(SIGTERM) }
        let viaA = WorkspaceClient(baseURL: a.base, token: token), viaB = WorkspaceClient(baseURL: b.base, token: token)
        let f = TestFile(in: dir.path, size: 3 * Blocks.size, seed: 302)
        let fd = f.open()
        defer { close(fd) }
        guard case .blocks(let tickets, _) = try viaA.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected an upload plan")
        }
        try #require(tickets.count == 3)
        let block = Int64(Blocks.size)
        // Block 0 through A, the first half of block 1 through B, the rest of block 1 through A.
        #expect(try viaA.patch(url: tickets[0].url, offset: 0, fd: fd, fileOffset: 0, length: block) == block)
        #expect(try viaB.patch(url: through(b.port, tickets[1].url), offset: 0, fd: fd, fileOffset: block, length: block / 2) == block / 2)
        #expect(try viaA.uploadOffset(url: tickets[1].url) == block / 2)
        #expect(try viaA.patch(url: tickets[1].url, offset: block / 2, fd: fd, fileOffset: block + block / 2, length: block / 2) == block)
        // Block 2 through A, slowed to a trickle by a proxy, and A killed while it is sent.
        let proxy = try LinkProxy(targetPort: a.port, oneWayDelay: 0, bytesPerSecond: 1_048_576)
        defer { proxy.stop() }
        let slow = WorkspaceClient(baseURL: "http://127.0.0.1:\(proxy.port)", token: token)
        let sent = Mutex<Result<Int64, ClientError>?>(nil)
        let sender = Thread {
            let r = Result { () throws(ClientError) -> Int64 in
                try slow.patch(url: through(proxy.port, tickets[2].url), offset: 0, fd: fd, fileOffset: 2 * block, length: block, checksum: false)
            }
            sent.withLock { $0 = r }
        }
        sender.start()
        // Pacing, not a check: 1.5 s into a 4 s trickle (4 MiB at 1 MiB/s), so A dies
        // with part of block 2 received.
        usleep(1_500_000)
        a.kill()
        try eventually("the PATCH through the killed server returns") { sent.withLock { $0 != nil } }
        if case .success = sent.withLock({ $0! }) { Issue.record("the PATCH through the killed server should have failed") }

        // Through B: blocks 0 and 1 are done; block 2 resumes from what A recorded (a PATCH
        // without checksum counts the bytes that landed before the client went away).
        guard case .blocks(let rest, _) = try viaB.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected an upload plan")
        }
        try #require(rest.map(\.index) == [2])
        let resumed = try viaB.uploadOffset(url: through(b.port, rest[0].url))
        #expect(resumed == rest[0].offset)
        #expect(try viaB.patch(url: through(b.port, rest[0].url), offset: resumed, fd: fd, fileOffset: 2 * block + resumed, length: block - resumed) == block)
        let recorded = try viaB.recordFile(FileRecord(path: "Camera Roll/two.mov", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                      captureDate: nil, mtime: 1, deviceSequence: 1))
        #expect(recorded.sequence == 1)
        #expect(try discarding { try viaB.download(content: f.content, to: $0) } == f.size)
    }

    /// Two server processes asked for the same uploads and recording the same files at
    /// once: one upload row per block and one version per path (unique constraints,
    /// retried serializable transactions), and the change feed's sequences stay unique
    /// and in order. (The blocks' bytes go through one process: two processes writing
    /// one upload's staging file at the same moment is the embedded disk store's limit,
    /// Docs/operations.md, "Scaled server".)
    @Test func twoServersRecordingTheSameThingsAtOnce() throws {
        guard let cluster = PostgresCluster.shared else { throw TestFailure("no cluster") }
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let url = try cluster.newDatabase()
        let name = PostgresCluster.databaseName(of: url)
        let token = try DeviceRegistry(dataDirectory: data, database: .postgres(connectionString: url)).add("phone")
        let a = try ServerProcess(data: data, extra: ["--database", url])
        defer { a.kill(SIGTERM) }
        let b = try ServerProcess(data: data, extra: ["--database", url])
        defer { b.kill(SIGTERM) }
        let files = (0..<8).map { TestFile(in: dir.path, size: 2 * Blocks.size + 100 * $0 + 1, seed: 400 + UInt64($0)) }
        let failures = Mutex<[String]>([])
        let done = Mutex(0)
        // Both ask for the same upload plans at once: one upload per block between them.
        for server in [a, b] {
            Thread {
                let client = WorkspaceClient(baseURL: server.base, token: token)
                for f in files {
                    do { _ = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) }
                    catch { failures.withLock { $0.append("\(server.port) plan: \(error)") } }
                }
                done.withLock { $0 += 1 }
            }.start()
        }
        try eventually("both servers answer every plan", within: 120) { done.withLock { $0 } == 2 }
        #expect(try cluster.psql(name, "SELECT count(*) FROM uploads") == "24")
        let viaA = WorkspaceClient(baseURL: a.base, token: token)
        for f in files {
            let fd = f.open()
            defer { close(fd) }
            try viaA.uploadFile(fd: fd, size: f.size)
        }
        // Both record every file at once.
        done.withLock { $0 = 0 }
        for server in [a, b] {
            Thread {
                let client = WorkspaceClient(baseURL: server.base, token: token)
                for (i, f) in files.enumerated() {
                    do {
                        try client.recordFile(FileRecord(path: "p/\(i)", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                         captureDate: nil, mtime: 1, deviceSequence: Int64(i)))
                    } catch { failures.withLock { $0.append("\(server.port) file \(i): \(error)") } }
                }
                done.withLock { $0 += 1 }
            }.start()
        }
        try eventually("both servers record every file", within: 120) { done.withLock { $0 } == 2 }
        #expect(failures.withLock { $0 } == [])
        let client = WorkspaceClient(baseURL: b.base, token: token)
        let listed = try client.listFiles(prefix: "p/")
        #expect(listed.map(\.path) == (0..<8).map { "p/\($0)" })
        for (i, f) in files.enumerated() { #expect(try client.fileVersions(device: "phone", path: "p/\(i)").map(\.hash) == [f.content.hex]) }
        let feed = try client.changes(since: 0).records.compactMap(\.sequence)
        #expect(feed == feed.sorted() && Set(feed).count == feed.count && feed.count == 8)
        #expect(try cluster.psql(name, "SELECT count(*) FROM blocks") == "24")
        #expect(try cluster.psql(name, "SELECT count(*) FROM contents") == "8")
    }
}

/// A presigned URL sent to another process of the workspace: it signs its path, not its
/// host, so any process that shares the records takes it.
func through(_ port: UInt16, _ url: String) -> String {
    guard let range = url.range(of: #"127\.0\.0\.1:[0-9]+"#, options: .regularExpression) else { return url }
    return url.replacingCharacters(in: range, with: "127.0.0.1:\(port)")
}
