import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A loopback TCP proxy that behaves like a home uplink: every byte is delayed by a
/// fixed one-way latency in each direction, and all connections share one rate cap
/// (a token bucket). The kernel here has no netem, so benchmarks and tests of "backup
/// over a real link" put this between the client and the server.
///
/// Design: per connection and direction, a reader thread timestamps each chunk it reads
/// and queues it; a writer thread sends each chunk once its time has come and the shared
/// bucket has the bytes. Latency therefore adds to every round trip (a request and its
/// reply each wait `delay`), and bandwidth is shared, as on a real link.
/// `@unchecked Sendable`: mutable state is guarded by `lock`, sockets belong to their threads.
public final class LinkProxy: @unchecked Sendable {
    public let port: UInt16
    private let targetPort: UInt16
    private let delay: Double
    private let bucket: TokenBucket
    private let listener: Int32
    private let lock = NSLock()
    private var stopped = false
    private var sockets: [Int32] = []
    private var fromTarget = 0

    /// Bytes the target (the server) has sent through the proxy so far: what a client
    /// behind it downloaded, headers included.
    public var bytesFromTarget: Int { lock.withLock { fromTarget } }
    /// A byte of every connection's reply stream to flip (a link that damages data).
    private let flipReplyByteAt: Int?

    /// Listens on 127.0.0.1 (a free port) and forwards to 127.0.0.1:`targetPort`. With
    /// `flipReplyByteAt`, the byte at that offset of each connection's server-to-client
    /// stream arrives with its lowest bit flipped (tests of download verification).
    public init(targetPort: UInt16, oneWayDelay: Double, bytesPerSecond: Double, flipReplyByteAt: Int? = nil) throws {
        self.targetPort = targetPort
        self.flipReplyByteAt = flipReplyByteAt
        self.delay = oneWayDelay
        self.bucket = TokenBucket(rate: bytesPerSecond)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LinkProxyError("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 64) == 0 else {
            close(fd)
            throw LinkProxyError("bind/listen: \(String(cString: strerror(errno)))")
        }
        var got = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &got) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        listener = fd
        port = UInt16(bigEndian: got.sin_port)
        let t = Thread { [self] in acceptLoop() }
        t.name = "link-proxy-accept"
        t.start()
    }

    /// Closes the listener and every forwarded connection.
    public func stop() {
        lock.withLock {
            stopped = true
            for s in sockets { shutdown(s, Int32(SHUT_RDWR)) }
        }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private static func loopback(port: UInt16) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        return addr
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if errno == EINTR { continue }
                return
            }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if connected != 0 { close(client); close(server); continue }
            var one: Int32 = 1
            for s in [client, server] { setsockopt(s, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size)) }
            let isStopped = lock.withLock { () -> Bool in
                sockets += [client, server]
                return stopped
            }
            if isStopped { close(client); close(server); return }
            let closer = Closer(client, server)
            pipe(from: client, to: server, closer: closer, counted: false, flipAt: nil)
            pipe(from: server, to: client, closer: closer, counted: true, flipAt: flipReplyByteAt)
        }
    }

    /// One direction: a reader that stamps chunks, a writer that sends them when due.
    private func pipe(from source: Int32, to destination: Int32, closer: Closer, counted: Bool, flipAt: Int?) {
        let queue = ChunkQueue()
        let reader = Thread { [delay, self] in
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            var passed = 0
            while true {
                let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { queue.finish(); return }
                if counted { lock.withLock { fromTarget += n } }
                if let flipAt, flipAt >= passed, flipAt < passed + n { buffer[flipAt - passed] ^= 1 }
                passed += n
                queue.push(Array(buffer[0..<n]), due: Date().timeIntervalSince1970 + delay)
            }
        }
        let writer = Thread { [bucket] in
            while let (chunk, due) = queue.pop() {
                let wait = due - Date().timeIntervalSince1970
                if wait > 0 { usleep(UInt32(wait * 1_000_000)) }
                var offset = 0
                while offset < chunk.count {
                    // Sent in slices of at most 16 KiB, each paid for in the shared bucket.
                    let slice = min(16 << 10, chunk.count - offset)
                    bucket.take(slice)
                    // MSG_NOSIGNAL: a peer that went away (a server killed by a test) must
                    // end this connection, not kill the test process with SIGPIPE.
                    let n = chunk.withUnsafeBytes { send(destination, $0.baseAddress! + offset, slice, Int32(MSG_NOSIGNAL)) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { closer.close(); return }
                    offset += n
                }
            }
            shutdown(destination, Int32(SHUT_WR))
            closer.close()
        }
        reader.start()
        writer.start()
    }
}

public struct LinkProxyError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// Closes both sockets of a connection once both directions are done.
/// `@unchecked Sendable`: guarded by its lock.
private final class Closer: @unchecked Sendable {
    private let lock = NSLock()
    private var remaining = 2
    private let fds: (Int32, Int32)
    init(_ a: Int32, _ b: Int32) { fds = (a, b) }
    func close() {
        let last = lock.withLock { () -> Bool in remaining -= 1; return remaining == 0 }
        if last { Glibc.close(fds.0); Glibc.close(fds.1) }
    }
}

/// Chunks in flight in one direction, in order. `@unchecked Sendable`: guarded by `condition`.
private final class ChunkQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var items: [([UInt8], Double)] = []
    private var head = 0
    private var done = false
    func push(_ chunk: [UInt8], due: Double) {
        condition.withLock { items.append((chunk, due)); condition.signal() }
    }
    func finish() { condition.withLock { done = true; condition.signal() } }
    func pop() -> ([UInt8], Double)? {
        condition.withLock {
            while head == items.count && !done { condition.wait() }
            if head == items.count { return nil }
            let item = items[head]
            head += 1
            if head > 1024 { items.removeFirst(head); head = 0 }
            return item
        }
    }
}

/// A rate cap shared by all connections. `@unchecked Sendable`: guarded by `lock`.
private final class TokenBucket: @unchecked Sendable {
    private let lock = NSLock()
    private let rate: Double
    private var available: Double
    private var last = Date().timeIntervalSince1970
    /// At most 20 ms worth of burst, so the cap holds on short scales too.
    private var capacity: Double { max(rate * 0.02, 16384) }
    init(rate: Double) { self.rate = rate; self.available = 0 }
    func take(_ bytes: Int) {
        while true {
            let wait: Double = lock.withLock {
                let now = Date().timeIntervalSince1970
                available = min(capacity, available + (now - last) * rate)
                last = now
                if available >= Double(bytes) { available -= Double(bytes); return 0 }
                return (Double(bytes) - available) / rate
            }
            if wait == 0 { return }
            usleep(UInt32(max(wait, 0.0005) * 1_000_000))
        }
    }
}
