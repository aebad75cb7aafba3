import Client
import Crypto
import Foundation
import HTTPClient
import Protocol
import Server
import Synchronization
import Testing
import TestSupport
import TestTraits

/// The change feed's long poll (`GET /v1/changes?wait=S`): a request with nothing newer
/// than its cursor is held, with no thread, until a record commits (in this process or,
/// with PostgreSQL, in another one on the same database) or its wait ends.
@Suite(.tags(.endToEnd), .serialized) struct LongPollTests {
    /// Something newer than the cursor, or a cursor past the feed's end: answered at once.
    @Test(arguments: Records.all) func answeredAtOnceWhenSomethingIsNewer(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = try s.uploaded(size: 1000, seed: 1)
        try s.record(f, at: "Camera Roll/a.jpg")
        let start = Date()
        let page = try s.client.changesPage(since: 0, wait: 30)
        #expect(page.changes.map(\.path) == ["Camera Roll/a.jpg"])
        let ahead = try s.client.changesPage(since: page.latestSequence! + 10, wait: 30)
        #expect(ahead.changes.isEmpty)
        #expect(Date().timeIntervalSince(start) < 10, "answered at once, not after the wait")
        #expect(s.server.heldRequests == 0)
    }

    /// A poll at the end of the feed is held until a record commits, then answered with it.
    @Test(arguments: Records.all) func heldUntilARecordCommits(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
        let poll = try Self.poll(s, since: latest, wait: 30)
        try eventually("the poll is held", within: 10) { s.server.heldRequests == 1 }
        let f = try s.uploaded(size: 1000, seed: 2)
        try s.record(f, at: "Camera Roll/b.jpg")
        let recorded = Date()
        let reply = try #require(poll.reply(timeout: 10), "the held poll was not answered within 10 s of the record")
        print("long poll (\(records)): answered \(String(format: "%.1f", Date().timeIntervalSince(recorded) * 1000)) ms after the record's 201")
        #expect(reply.status == 200)
        let page = try WireJSON.decode(ChangesResponse.self, from: reply.body)
        #expect(page.changes.map(\.path) == ["Camera Roll/b.jpg"])
        #expect(page.nextSequence > latest)
        #expect(s.server.heldRequests == 0)
    }

    /// Followers at the end of the feed while records commit back to back, at seeded
    /// random moments: each follower's long polls keep up, none waits out its wait. A
    /// commit between a poll's read of its page and its registration must still wake
    /// it (the generation read before the page); a lost wake-up holds a follower here
    /// until its wait ends, past the deadline.
    @Test(arguments: Records.all) func noWakeUpIsLostWhileRecordsCommit(_ records: Records) throws {
        let seed = testSeed()
        print("LongPollTests.noWakeUpIsLostWhileRecordsCommit(\(records)) seed \(seed)")
        var random = SeededGenerator(seed: seed)
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = try s.uploaded(size: 1000, seed: 5)
        let count = 200, followers = 8
        let slowest = Mutex<Double>(0)
        let reached = Mutex<[Int64]>(Array(repeating: 0, count: followers))
        let stop = Atomic<Bool>(false)
        var threads: [DispatchSemaphore] = []
        for i in 0..<followers {
            let done = DispatchSemaphore(value: 0)
            threads.append(done)
            let client = WorkspaceClient(baseURL: s.base, token: s.token)
            Thread {
                defer { done.signal() }
                var cursor: Int64 = 0
                while !stop.load(ordering: .relaxed) {
                    let start = Date()
                    guard let page = try? client.changesPage(since: cursor, limit: 10, wait: 20) else { return }
                    slowest.withLock { $0 = max($0, Date().timeIntervalSince(start)) }
                    cursor = page.nextSequence
                    reached.withLock { $0[i] = cursor }
                }
            }.start()
        }
        var last: Int64 = 0
        for n in 0..<count {
            if Int.random(in: 0..<3, using: &random) == 0 { usleep(UInt32.random(in: 0..<3000, using: &random)) }
            last = try s.record(f, at: "Camera Roll/\(n).jpg", sequence: Int64(n + 1)).sequence ?? 0
        }
        let caughtUp = (try? eventually("every follower reaches the last record", within: 10) {
            reached.withLock { $0.allSatisfy { $0 == last } }
        }) != nil
        stop.store(true, ordering: .relaxed)
        try s.record(f, at: "Camera Roll/end.jpg", sequence: Int64(count + 1))  // wakes the followers' last polls
        for done in threads { done.wait() }
        #expect(caughtUp, "followers at \(reached.withLock { $0 }), the feed at \(last) (seed \(seed))")
        print("LongPollTests.noWakeUpIsLostWhileRecordsCommit(\(records)): the slowest poll took \(String(format: "%.2f", slowest.withLock { $0 })) s")
        #expect(slowest.withLock { $0 } < 10, "a poll waited out its wait: a wake-up was lost (seed \(seed))")
    }

    /// Nothing happens: the poll is answered empty when its wait ends, not before.
    @Test(arguments: Records.all) func answeredEmptyAtTheDeadline(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = try s.uploaded(size: 1000, seed: 3)
        try s.record(f, at: "Camera Roll/c.jpg")
        let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
        let start = Date()
        let page = try s.client.changesPage(since: latest, wait: 2)
        let waited = Date().timeIntervalSince(start)
        #expect(page.changes.isEmpty && (page.deletions ?? []).isEmpty)
        #expect(page.nextSequence == latest)
        #expect(waited >= 1.9, "answered after \(waited) s, before its wait of 2 s ended")
        #expect(waited < 10)
    }

    /// A server stopping answers its held polls with 503 and Retry-After.
    @Test(arguments: Records.all) func stoppingAnswersHeldPolls(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let polls = try (0..<5).map { _ in try Self.poll(s, since: 0, wait: 60) }
        try eventually("the polls are held", within: 10) { s.server.heldRequests == 5 }
        s.server.stop()
        for poll in polls {
            let reply = poll.reply(timeout: 10)
            #expect(reply?.status == 503)
            #expect(reply?.header("Retry-After") == "2")
        }
    }

    /// Held polls cost no thread: with 500 held, health answers and a device backs up a
    /// file (its upload and record need the worker threads), and the record answers all.
    @Test(arguments: Records.all) func heldPollsCostNoThread(_ records: Records) throws {
        let s = try TestServer(records: records, connectionLimits: ConnectionLimits(perAddress: 600, total: 1200))
        defer { s.stop() }
        let polls = try (0..<500).map { _ in try Self.poll(s, since: 0, wait: 60) }
        try eventually("500 polls held", within: 30) { s.server.heldRequests == 500 }
        #expect(try s.send("GET", "/v1/health", auth: false).status == 200)
        let f = try s.uploaded(size: Blocks.size + 1000, seed: 4)
        try s.record(f, at: "Camera Roll/d.mov")
        var answered = 0
        for poll in polls {
            guard let reply = poll.reply(timeout: 20), reply.status == 200,
                  let page = try? WireJSON.decode(ChangesResponse.self, from: reply.body) else { continue }
            if page.changes.map(\.path) == ["Camera Roll/d.mov"] { answered += 1 }
        }
        #expect(answered == 500)
        #expect(s.server.heldRequests == 0)
    }

    /// Devices that follow the feed poll again on their kept-alive connection after each
    /// answer. libmicrohttpd zeroes a connection's whole memory pool when it readies it for
    /// the next request, so every page of the pool stays resident while the device waits:
    /// the pool's size is what each such device costs (ConnectionMemory.swift). 300
    /// devices answered twice on the same connections grow the server's RSS by less than
    /// 80 KiB each (with the 256 KiB pools of before, by about 250 KiB each).
    @Test(arguments: Records.all) func devicesPollingAgainHoldLittleMemory(_ records: Records) throws {
        let devices = 300
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let database = try records.freshLocation()
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data, database: database).add("follower")
        let server = try ServerProcess(data: data, extra: Records.arguments(database) + [
            "--access-log", "off", "--max-connections-per-address", String(devices + 50), "--max-connections", String(2 * devices)])
        defer { server.kill(SIGTERM) }
        let client = WorkspaceClient(baseURL: server.base, token: token)
        let metrics = HTTPConnection()
        func held() throws -> Int {
            let text = String(decoding: try metrics.perform(method: "GET", url: server.base + API.metrics).body, as: UTF8.self)
            let line = text.split(separator: "\n").first { $0.hasPrefix("vdrive_http_held_requests ") }
            return line.flatMap { Int($0.split(separator: " ").last ?? "") } ?? -1
        }
        func record(_ seed: UInt64) throws {
            let f = TestFile(in: dir.path, size: 1000, seed: seed)
            let fd = f.open()
            defer { close(fd) }
            try client.uploadFile(fd: fd, size: f.size)
            _ = try client.recordFile(FileRecord(path: "Camera Roll/\(seed).jpg", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                 captureDate: nil, mtime: 1, deviceSequence: Int64(seed)))
        }
        try record(1)
        let before = try #require(Self.residentKiB(server.process.processIdentifier))
        let connections = try (0..<devices).map { _ in try RawConnection(port: server.port) }
        for round in 1...2 {
            let latest = try client.changesPage(since: 0).latestSequence ?? 0
            let poll = Array("GET /v1/changes?since=\(latest)&wait=60 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n".utf8)
            for c in connections { #expect(c.send(poll)) }
            var seen = 0
            try eventually("\(devices) polls held (round \(round)): \(seen) were", within: 30) {
                seen = try held()
                return seen == devices
            }
            try record(UInt64(1 + round))
            let answered = connections.filter { $0.reply(timeout: 20)?.status == 200 }.count
            try #require(answered == devices, "round \(round): \(answered) of \(devices) polls answered")
        }
        let after = try #require(Self.residentKiB(server.process.processIdentifier))
        let each = Double(after - before) / Double(devices)
        print("LongPollTests (\(records)): RSS \(before) KiB before, \(after) KiB with \(devices) kept-alive connections after two answers: \(String(format: "%.1f", each)) KiB each")
        #expect(each < 80, "each kept-alive connection costs \(each) KiB of resident memory")
    }

    /// `wait` is a number like the others: out of bounds or not digits is 400 naming it.
    @Test func untrustedWaitIsRefused() throws {
        let s = try TestServer()
        defer { s.stop() }
        for bad in ["61", "-1", "abc", "1e3", "%2B5", "99999999999999999999999", "", "0x10", "5%00"] {
            let reply = try s.send("GET", "/v1/changes?since=0&wait=\(bad)")
            #expect(reply.status == 400, "wait=\(bad) answered \(reply.status)")
            #expect(reply.error?.field == "wait", "wait=\(bad): \(reply.text)")
        }
        #expect(try s.send("GET", "/v1/changes?since=0&wait=0").status == 200)
        #expect(s.server.heldRequests == 0)
    }

    /// Two server processes on one PostgreSQL: a poll held by one is answered when a
    /// record is made through the other (NOTIFY at its commit, LISTEN in the first).
    @Test(.enabled(if: PostgresCluster.isInstalled)) func aRecordThroughAnotherProcessWakesAPoll() throws {
        let s = try TestServer(records: .postgres)
        defer { s.stop() }
        let other = try Self.secondProcess(of: s)
        defer { other.kill(SIGTERM) }
        let viaOther = WorkspaceClient(baseURL: other.base, token: s.token)
        for round in 1...3 {
            let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
            let polls = try (0..<3).map { _ in try Self.poll(s, since: latest, wait: 60) }
            try eventually("the polls are held", within: 10) { s.server.heldRequests == 3 }
            let path = "Camera Roll/other-\(round).jpg"
            try Self.record(through: viaOther, in: s, seed: UInt64(10 + round), at: path)
            let recorded = Date()
            for poll in polls {
                let reply = try #require(poll.reply(timeout: 10), "a poll held by process 1 was not answered within 10 s of a record through process 2")
                #expect(try WireJSON.decode(ChangesResponse.self, from: reply.body).changes.map(\.path) == [path])
            }
            print("long poll across processes: answered \(String(format: "%.1f", Date().timeIntervalSince(recorded) * 1000)) ms after the record's 201 (round \(round))")
        }
    }

    /// PostgreSQL restarted while polls are held: once the first process listens again,
    /// a record through the second answers them, and a later record wakes new polls.
    @Test(.enabled(if: PostgresCluster.isInstalled)) func databaseRestartedWhilePollsAreHeld() throws {
        let cluster = try PostgresCluster()
        defer { cluster.stop() }
        let s = try TestServer(records: .postgres, cluster: cluster)
        defer { s.stop() }
        let other = try Self.secondProcess(of: s)
        defer { other.kill(SIGTERM) }
        let viaOther = WorkspaceClient(baseURL: other.base, token: s.token)
        try eventually("the first process listens", within: 10) { s.server.listenerConnections == 1 }
        let polls = try (0..<5).map { _ in try Self.poll(s, since: 0, wait: 60) }
        try eventually("the polls are held", within: 10) { s.server.heldRequests == 5 }

        try cluster.restart()
        // The second process's pooled connections died too: its first calls may get 503.
        try Self.record(through: viaOther, in: s, seed: 21, at: "Camera Roll/after-restart.jpg", retryFor: 20)
        for poll in polls {
            let reply = try #require(poll.reply(timeout: 15), "a poll held across the restart was not answered")
            #expect(try WireJSON.decode(ChangesResponse.self, from: reply.body).changes.map(\.path) == ["Camera Roll/after-restart.jpg"])
        }
        try eventually("the first process listens again", within: 15) { s.server.listenerConnections >= 2 }

        let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
        let later = try Self.poll(s, since: latest, wait: 60)
        try eventually("the new poll is held", within: 10) { s.server.heldRequests == 1 }
        try Self.record(through: viaOther, in: s, seed: 22, at: "Camera Roll/later.jpg")
        let reply = try #require(later.reply(timeout: 10), "a poll held after the restart was not answered by a record through process 2")
        #expect(try WireJSON.decode(ChangesResponse.self, from: reply.body).changes.map(\.path) == ["Camera Roll/later.jpg"])
    }

    /// The listening connection cut while PostgreSQL stays up, and a record committed
    /// through the second process before the first listens again (its notification is
    /// sent to nobody): the first process checks every held poll once it listens again,
    /// so the poll is answered with the record, not at its deadline.
    @Test(.enabled(if: PostgresCluster.isInstalled)) func aNotificationMissedWhileReconnectingIsNotLost() throws {
        let cluster = try #require(PostgresCluster.shared)
        let s = try TestServer(records: .postgres)
        defer { s.stop() }
        guard case .postgres(let url) = s.database else { throw TestFailure("expected PostgreSQL records") }
        let other = try Self.secondProcess(of: s)
        defer { other.kill(SIGTERM) }
        let viaOther = WorkspaceClient(baseURL: other.base, token: s.token)
        try eventually("the first process listens", within: 10) { s.server.listenerConnections == 1 }
        let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
        let poll = try Self.poll(s, since: latest, wait: 60)
        try eventually("the poll is held", within: 10) { s.server.heldRequests == 1 }
        let f = TestFile(in: s.dir.path, size: 1000, seed: 31)
        let fd = f.open()
        defer { close(fd) }
        try viaOther.uploadFile(fd: fd, size: f.size)

        // Every listening session of the database (both processes'); the pools' stay.
        try cluster.psql(PostgresCluster.databaseName(of: url), """
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = current_database() AND query = 'LISTEN vdrive_changes'
            """)
        _ = try viaOther.recordFile(FileRecord(path: "Camera Roll/missed.jpg", hash: f.content.hex, size: f.size,
                                               blocks: f.manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: 1))
        let reply = try #require(poll.reply(timeout: 10), "the poll was not answered within 10 s of a record made while its process reconnected")
        #expect(try WireJSON.decode(ChangesResponse.self, from: reply.body).changes.map(\.path) == ["Camera Roll/missed.jpg"])
        try eventually("the first process listens again", within: 10) { s.server.listenerConnections >= 2 }
    }

    // MARK: helpers

    /// A process's resident memory (`VmRSS`), nil when it cannot be read.
    static func residentKiB(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
        return line.flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true)[1]) }
    }

    /// `GET /v1/changes?since=&wait=` sent on a connection of its own; read its reply later.
    static func poll(_ s: TestServer, since: Int64, wait: Int) throws -> RawConnection {
        let c = try RawConnection(port: s.server.port)
        c.send(Array("GET /v1/changes?since=\(since)&wait=\(wait) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(s.auth)\r\n\r\n".utf8))
        return c
    }

    /// A `vdrive serve` process on the same PostgreSQL database and data folder as `s`.
    static func secondProcess(of s: TestServer) throws -> ServerProcess {
        guard case .postgres(let url) = s.database else { throw TestFailure("the second process needs PostgreSQL records") }
        return try ServerProcess(data: s.server.configuration.dataDirectory, extra: ["--database", url])
    }

    /// Uploads and records a small file through `client` (another process), retrying
    /// while that process fails transiently (503) for up to `retryFor` seconds.
    static func record(through client: WorkspaceClient, in s: TestServer, seed: UInt64, at path: String, retryFor: Double = 0) throws {
        let f = TestFile(in: s.dir.path, size: 1000, seed: seed)
        let deadline = Date().addingTimeInterval(retryFor)
        while true {
            let fd = f.open()
            defer { close(fd) }
            do throws(ClientError) {
                try client.uploadFile(fd: fd, size: f.size)
                _ = try client.recordFile(FileRecord(path: path, hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                     captureDate: nil, mtime: 1, deviceSequence: Int64(seed)))
                return
            } catch {
                guard error.isTransient, Date() < deadline else { throw error }
                usleep(200_000)
            }
        }
    }
}
