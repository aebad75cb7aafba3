import Client
import Foundation
import Protocol
import Synchronization
@testable import Server
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// No client locks others out: slow connections from one address (127.0.0.2) are held,
/// limited and cut by the server's deadlines while a device on 127.0.0.1 backs up and
/// `/v1/health` answers. Deadlines are shortened here so the test stays fast.
@Suite(.tags(.endToEnd), .serialized) struct SlowClientTests {
    static let attacker = "127.0.0.2"

    /// Many slow connections (headers and bodies trickling, idle keep-alives) do not stop
    /// a device; each is closed by the server once its deadline passes; an upload that
    /// keeps sending, slowly, for longer than every deadline completes.
    @Test(arguments: Records.all) func slowConnectionsAreCutAndOthersAreServed(_ records: Records) throws {
        let limits = ConnectionLimits(perAddress: 1000, total: 2000, headerSeconds: 2, idleSeconds: 3, bodyWindowSeconds: 2, minimumBodyBytes: 1024)
        let s = try TestServer(records: records, connectionLimits: limits)
        defer { s.stop() }
        let crowd = try SlowCrowd(port: s.server.port, from: Self.attacker, auth: s.auth, each: 100)
        #expect(crowd.open.count == 300)
        // The crowd trickles on its own thread until the server has closed all of it.
        let left = NSLock(), finished = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var stillOpen: [String: Int] = [:]
        Thread {
            let deadline = Date().addingTimeInterval(25)
            while Date() < deadline && !crowd.allClosed() {
                crowd.trickle()
                usleep(400_000)
            }
            left.withLock { stillOpen = crowd.stillOpen() }
            finished.signal()
        }.start()

        var uploaded = 0
        // The device backs up while the crowd trickles; health answers throughout.
        for i in 0..<8 {
            let f = TestFile(in: s.dir.path, size: 300_000 + i, seed: UInt64(100 + i))
            try s.store(f, at: "Camera Roll/IMG_\(i).jpg")
            uploaded += 1
            #expect(try s.send("GET", "/v1/health", auth: false).status == 200)
        }
        #expect(uploaded == 8)

        // A photo sent at a slow, steady rate for longer than every deadline still lands.
        let slow = TestFile(in: s.dir.path, size: 1 << 20, seed: 7)
        let fd = slow.open()
        defer { close(fd) }
        let began = Date()
        try s.client.uploadFile(fd: fd, size: slow.size, progress: { sent in
            let due = began.addingTimeInterval(Double(sent) / Double(256 << 10))
            let ahead = due.timeIntervalSinceNow
            if ahead > 0 { usleep(UInt32(min(ahead, 0.2) * 1_000_000)) }
            return true
        })
        #expect(Date().timeIntervalSince(began) > Double(limits.bodyWindowSeconds + limits.headerSeconds))
        try s.record(slow, at: "Camera Roll/slow.jpg")
        #expect(try s.hasBlock(slow.digest))

        finished.wait()
        left.withLock { #expect(stillOpen.isEmpty, "slow connections the server did not close: \(stillOpen)") }
        #expect(s.server.connectionsCut >= 300)
        #expect(try s.send("GET", "/v1/health", auth: false).status == 200)
    }

    /// An address over its limit is closed at once; another address is served.
    @Test(arguments: Records.all) func oneAddressCannotTakeEveryConnection(_ records: Records) throws {
        let limits = ConnectionLimits(perAddress: 16, total: 64)
        let s = try TestServer(records: records, connectionLimits: limits)
        defer { s.stop() }
        var crowd: [SlowSocket] = []
        for _ in 0..<16 {
            let c = try SlowSocket(port: s.server.port, from: Self.attacker)
            c.send("GET /v1/health HTTP/1.1\r\nHo")
            crowd.append(c)
        }
        let extra = try (0..<8).map { _ in try SlowSocket(port: s.server.port, from: Self.attacker) }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline && !extra.allSatisfy({ $0.closedByServer() }) { usleep(20_000) }
        #expect(extra.allSatisfy { $0.closedByServer() }, "connections over the per-address limit were not closed")
        #expect(!crowd.contains { $0.closedByServer() }, "the held connections within the limit are open")
        // The device on another address is served.
        let f = TestFile(in: s.dir.path, size: 100_000, seed: 3)
        try s.store(f, at: "Camera Roll/a.jpg")
        let back = try discarding { try s.client.download(content: f.content, to: $0) }
        #expect(back == f.size)
        #expect(try s.send("GET", "/v1/health", auth: false).status == 200)
    }

    /// A held request costs no thread: many are held at once while others are served, and
    /// each is answered when its event comes; stopping the server answers the rest with 503.
    @Test func heldRequestsAreAnsweredByTheirEvent() throws {
        let handler = HoldingHandler()
        let daemon = try HTTPDaemon(host: "127.0.0.1", port: 0, handler: handler, limits: ConnectionLimits(perAddress: 500, total: 1000), threads: 2, workers: 2)
        var stopped = false
        defer { if !stopped { daemon.stop() } }
        let waiting = try (0..<200).map { _ in try RawConnection(port: daemon.port) }
        for c in waiting { c.send(Array("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) }
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline && daemon.heldCount < 200 { usleep(10_000) }
        #expect(daemon.heldCount == 200)
        // Two epoll threads and two workers serve others while 200 are held.
        let other = try RawConnection(port: daemon.port)
        other.send(Array("GET /now HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(other.reply(timeout: 5)?.status == 200)

        // Requests are held in arrival order, not in `waiting`'s: count the statuses.
        handler.answerAll(status: 200, except: 10)
        var statuses = [Int?](repeating: nil, count: waiting.count)
        let answered = Date().addingTimeInterval(10)
        while Date() < answered && statuses.compactMap({ $0 }).count < 190 {
            for (i, c) in waiting.enumerated() where statuses[i] == nil { statuses[i] = c.reply(timeout: 0.01)?.status }
        }
        #expect(statuses.filter { $0 == 200 }.count == 190)
        daemon.stop()
        stopped = true
        for (i, c) in waiting.enumerated() where statuses[i] == nil { statuses[i] = c.reply(timeout: 5)?.status }
        #expect(statuses.filter { $0 == 503 }.count == 10)
    }
}

extension SlowClientTests {
    /// 128 kept-alive connections send their next request while the daemon's one thread
    /// is busy: they are all ready at once when it looks again. libmicrohttpd's epoll
    /// loop reads at most 128 events per call and, having got exactly 128, waits in a
    /// second call with the loop's timeout (up to the 30 s idle timeout) before serving
    /// them; its poll loop has no such limit. Every request is answered within seconds.
    @Test func requestsReadyTogetherAreServedAtOnce() throws {
        let handler = StallingHandler()
        let daemon = try HTTPDaemon(host: "127.0.0.1", port: 0, handler: handler, limits: ConnectionLimits(perAddress: 500, total: 1000), threads: 1, workers: 2)
        defer { daemon.stop() }
        let batch = 128
        let connections = try (0..<batch).map { _ in try RawConnection(port: daemon.port) }
        let request = Array("GET /now HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        // Each connection is served once, so that all are kept-alive and idle in the loop.
        for c in connections { #expect(c.send(request)) }
        for c in connections { try #require(c.reply(timeout: 10)?.status == 200) }
        let blocker = try RawConnection(port: daemon.port)
        #expect(blocker.send(Array("GET /stall HTTP/1.1\r\nHost: x\r\n\r\n".utf8)))
        try eventually("the daemon's thread is busy") { handler.stalling.load(ordering: .acquiring) }
        for c in connections { #expect(c.send(request)) }
        handler.release()
        #expect(blocker.reply(timeout: 10)?.status == 200)
        let start = Date()
        let answered = connections.filter { $0.reply(timeout: 10)?.status == 200 }.count
        let knocks = daemon.guardian.knocks.load(ordering: .relaxed)
        print("SlowClientTests: \(answered) of \(batch) requests ready together answered in \(String(format: "%.2f", Date().timeIntervalSince(start))) s, \(knocks) knock(s)")
        #expect(answered == batch)
    }
}

/// Answers at once, except `/stall`, which keeps the daemon's thread until `release`.
private final class StallingHandler: HTTPHandler, Sendable {
    let stalling = Atomic<Bool>(false)
    private let gate = DispatchSemaphore(value: 0)

    func route(_ request: HTTPRequest) -> Route {
        if request.path == "/stall" {
            stalling.store(true, ordering: .releasing)
            gate.wait()
        }
        return .respond(.empty(200))
    }

    /// Lets the stalled request go. Loopback delivers a send into the peer's queue before
    /// it returns; the pause is a margin for the kernel's deferred work, not a timing.
    func release() {
        usleep(100_000)
        gate.signal()
    }
}

/// Holds every `/hold` request until `answerAll`; answers anything else at once.
private final class HoldingHandler: HTTPHandler, @unchecked Sendable { // `held` is guarded by `lock`
    private let lock = NSLock()
    private var held: [HeldRequest] = []

    func route(_ request: HTTPRequest) -> Route {
        if request.path == "/hold" {
            return .hold { [self] h in lock.withLock { held.append(h) } }
        }
        return .respond(.empty(200))
    }

    func answerAll(status: Int, except kept: Int) {
        let now = lock.withLock { () -> [HeldRequest] in
            let n = held.count - kept
            defer { held.removeFirst(n) }
            return Array(held.prefix(n))
        }
        // From another thread, as an event would.
        let done = DispatchSemaphore(value: 0)
        Thread { for h in now { h.answer(.empty(status)) }; done.signal() }.start()
        done.wait()
    }
}
