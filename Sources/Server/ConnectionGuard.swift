import Foundation
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What one client may hold of the server. The server faces the internet: a client
/// that opens many connections, or sends its request a byte at a time, must not
/// keep others out. Docs/operations.md, "Connection limits", is the operator's view.
public struct ConnectionLimits: Sendable, Equatable {
    /// Open connections from one IP address; more are accepted and closed at once.
    public var perAddress: UInt32
    /// Open connections in all. The process's descriptor limit is raised to fit them.
    public var total: UInt32
    /// Seconds a connection has for a request's header, from its opening or from the
    /// end of its previous reply (an idle keep-alive is closed after it too).
    public var headerSeconds: Int
    /// Seconds without a byte moving either way before libmicrohttpd closes the connection.
    public var idleSeconds: UInt32
    /// A request body must bring `minimumBodyBytes` every `bodyWindowSeconds`.
    public var bodyWindowSeconds: Int
    public var minimumBodyBytes: Int64

    public init(perAddress: UInt32 = 64, total: UInt32 = 4096, headerSeconds: Int = 15, idleSeconds: UInt32 = 30,
                bodyWindowSeconds: Int = 30, minimumBodyBytes: Int64 = 16 << 10) {
        self.perAddress = perAddress; self.total = total; self.headerSeconds = headerSeconds
        self.idleSeconds = idleSeconds; self.bodyWindowSeconds = bodyWindowSeconds; self.minimumBodyBytes = minimumBodyBytes
    }

    /// What is wrong with these limits, for the operator who typed them; nil when usable.
    public var problem: String? {
        if perAddress < 1 { return "the per-address connection limit must be at least 1" }
        if total < perAddress { return "the total connection limit (\(total)) must be at least the per-address limit (\(perAddress))" }
        if total > 1 << 20 { return "the total connection limit (\(total)) is above 1048576 descriptors" }
        if headerSeconds < 1 || idleSeconds < 1 || bodyWindowSeconds < 1 { return "the connection deadlines must be at least 1 second" }
        if minimumBodyBytes < 0 { return "the minimum body bytes per window must not be negative" }
        return nil
    }
}

/// One open connection as the guard sees it (libmicrohttpd's socket context).
/// `@unchecked Sendable`: `state` is a Mutex; `fd` never changes.
final class ConnectionRecord: @unchecked Sendable {
    enum Phase {
        /// Waiting for a request's header since `since`.
        case header
        /// Receiving a body; the current window began at `since` with `windowStart` bytes.
        case body
        /// Routing, finishing, held or replying: not the client's turn.
        case busy
    }
    /// Which deadline closed the connection.
    enum Cut { case header, body }
    struct State {
        var phase = Phase.header
        var since: Int64
        var bytes: Int64 = 0
        var windowStart: Int64 = 0
        /// Replies completed on this connection.
        var requests = 0
        var cut: Cut?
        /// When a sweep first saw bytes waiting that libmicrohttpd had not read (cleared
        /// when it makes progress): a stalled epoll thread (ListenerKnock.swift).
        var unreadSince: Int64?
    }
    let fd: Int32
    let client: ClientAddress
    let state: Mutex<State>

    init(fd: Int32, now: Int64, client: ClientAddress = .unknown) {
        self.fd = fd
        self.client = client
        state = Mutex(State(since: now))
    }

    func enter(_ phase: Phase) {
        let now = monotonicMilliseconds()
        state.withLock { s in
            s.phase = phase
            s.since = now
            s.windowStart = s.bytes
            s.unreadSince = nil
        }
    }

    func received(_ count: Int) {
        state.withLock {
            $0.bytes += Int64(count)
            $0.unreadSince = nil
        }
    }

    /// Called mid-body on the connection's epoll thread: when the client has closed and
    /// nothing is left to read, shuts the socket down so that libmicrohttpd sees it.
    /// Its epoll mode (0.9.75) misses an end of input that arrived with the last data
    /// (a short read clears its "readable" mark, and edge-triggered epoll reports no
    /// new edge), and would keep the connection, and the upload it claims, until a
    /// timeout. The body is incomplete, so the request cannot be answered anyway.
    func closeIfClientLeft() {
        if peek() == .clientLeft { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    enum Waiting { case nothing, bytes, clientLeft }

    /// What waits on the socket, by a peek that consumes nothing: bytes not read yet, the
    /// client's close with nothing left to read, or nothing.
    func peek() -> Waiting {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n == 0 ? .clientLeft : n > 0 ? .bytes : .nothing
    }
}

/// Closes the connections that are too slow: a header not complete within its deadline,
/// a body bringing less than its minimum per window. libmicrohttpd has neither (its
/// timeout is reset by every byte, so a trickle keeps a connection forever), so a thread
/// looks at every connection twice a second and shuts the socket down: libmicrohttpd
/// then sees the end of input and closes the connection as if the client had left.
/// The descriptor is shut down under `records`' lock, and a connection leaves `records`
/// (libmicrohttpd's close notification) before its descriptor is closed, so a number
/// reused by a new connection is never touched.
final class ConnectionGuard: Sendable {
    let limits: ConnectionLimits
    private let records = Mutex<[ObjectIdentifier: ConnectionRecord]>([:])
    private let running = Mutex(true)
    /// Connections cut by a deadline since the start.
    let cut = Atomic<Int>(0)

    /// Wakes libmicrohttpd's threads when bytes wait unread (ListenerKnock.swift).
    private let knock: ListenerKnock?
    /// Knocks since the start.
    let knocks = Atomic<Int>(0)

    init(limits: ConnectionLimits, knock: ListenerKnock? = nil) {
        self.limits = limits
        self.knock = knock
        Thread(named: "vd-conn-guard") { [self] in sweepLoop() }.start()
    }

    func add(_ record: ConnectionRecord) { records.withLock { $0[ObjectIdentifier(record)] = record } }
    func remove(_ record: ConnectionRecord) { records.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(record)) } }

    func stop() { running.withLock { $0 = false } }

    /// Connections open now.
    var openCount: Int { records.withLock { $0.count } }

    private func sweepLoop() {
        while running.withLock({ $0 }) {
            usleep(500_000)
            sweep(now: monotonicMilliseconds())
        }
    }

    func sweep(now: Int64) {
        let header = Int64(limits.headerSeconds) * 1000
        let window = Int64(limits.bodyWindowSeconds) * 1000
        var stalled = false
        records.withLock { all in
            for record in all.values {
                let tooSlow = record.state.withLock { s -> Bool in
                    switch s.phase {
                    case .busy: return false
                    case .header:
                        guard now - s.since >= header else { return false }
                        s.cut = .header
                        return true
                    case .body:
                        guard now - s.since >= window else { return false }
                        if s.bytes - s.windowStart < limits.minimumBodyBytes {
                            s.cut = .body
                            return true
                        }
                        s.since = now
                        s.windowStart = s.bytes
                        return false
                    }
                }
                if tooSlow {
                    // Once: the record stays until libmicrohttpd notices and closes.
                    record.state.withLock { $0.phase = .busy }
                    shutdown(record.fd, Int32(SHUT_RDWR))
                    cut.add(1, ordering: .relaxed)
                } else if record.state.withLock({ $0.phase != .busy }) {
                    switch record.peek() {
                    case .clientLeft:
                        // The same end of input libmicrohttpd's epoll misses mid-body, missed
                        // while waiting for a header: a client that sent part of one and left
                        // would hold its place under the per-address limit until the header
                        // deadline (a fuzzer, or a phone losing its network, refused for 15 s).
                        record.state.withLock { $0.phase = .busy }
                        shutdown(record.fd, Int32(SHUT_RDWR))
                    case .bytes:
                        // Unread at two looks half a second apart: its thread is not reading.
                        record.state.withLock { s in
                            if let seen = s.unreadSince, now - seen >= 400 { stalled = true } else if s.unreadSince == nil { s.unreadSince = now }
                        }
                    case .nothing:
                        record.state.withLock { $0.unreadSince = nil }
                    }
                }
            }
        }
        if stalled, let knock {
            knock.knock()
            knocks.add(1, ordering: .relaxed)
        }
    }
}

func monotonicMilliseconds() -> Int64 { monotonicMicroseconds() / 1000 }

func monotonicMicroseconds() -> Int64 {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Int64(t.tv_sec) * 1_000_000 + Int64(t.tv_nsec) / 1000
}

/// Raises this process's open-file limit to fit `needed` descriptors (up to the hard
/// limit): Debian's default soft limit of 1024 would refuse connections long before
/// the server's own limit.
func raiseDescriptorLimit(to needed: UInt64) {
    var limit = rlimit()
    let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    guard getrlimit(resource, &limit) == 0, limit.rlim_cur < rlim_t(needed) else { return }
    limit.rlim_cur = min(rlim_t(needed), limit.rlim_max)
    _ = setrlimit(resource, &limit)
}
