import Foundation
#if canImport(Glibc)
import Glibc
#endif

public struct SlowSocketError: Error, CustomStringConvertible {
    public let description: String
}

/// A TCP connection from a chosen loopback address, written a little at a time.
public final class SlowSocket {
    public let fd: Int32
    private var closed = false

    public init(port: UInt16, from source: String) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SlowSocketError(description: "socket: \(String(cString: strerror(errno)))") }
        var local = ipv4Address(source, port: 0)
        var addr = ipv4Address("127.0.0.1", port: port)
        let ok = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0 && withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
        guard ok else {
            let e = errno
            Glibc.close(fd)
            throw SlowSocketError(description: "connect from \(source) to 127.0.0.1:\(port): \(String(cString: strerror(e)))")
        }
    }

    deinit { Glibc.close(fd) }

    @discardableResult
    public func send(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } == bytes.count
    }

    /// True once the server closed the connection (end of file or reset); reads and drops
    /// whatever reply came before.
    public func closedByServer() -> Bool {
        if closed { return true }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 4096, Int32(MSG_DONTWAIT)) }
            if n > 0 { continue }
            if n < 0 && (errno == EAGAIN || errno == EINTR) { return false }
            closed = true
            return true
        }
    }
}

/// The slow connections of one address (what a slowloris holds): headers sent a byte at a time, bodies sent a
/// byte at a time after a whole header, and idle keep-alives after one answered request.
public final class SlowCrowd: @unchecked Sendable { // used by one thread at a time
    private(set) var headers: [SlowSocket] = []
    private(set) var bodies: [SlowSocket] = []
    private(set) var idle: [SlowSocket] = []
    private var step = 0
    private let header = Array("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".utf8)

    public init(port: UInt16, from source: String, auth: String, each: Int) throws {
        for _ in 0..<each {
            headers.append(try SlowSocket(port: port, from: source))
            let body = try SlowSocket(port: port, from: source)
            body.send("POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\n\(auth)\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
            bodies.append(body)
            let keep = try SlowSocket(port: port, from: source)
            keep.send("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            idle.append(keep)
        }
        trickle()
    }

    public var open: [SlowSocket] { headers + bodies + idle }

    /// One more byte on every trickling connection.
    public func trickle() {
        let byte = String(UnicodeScalar(header[step % header.count]))
        step += 1
        for c in headers { c.send(byte) }
        for c in bodies { c.send(" ") }
        for c in idle { _ = c.closedByServer() }  // reads the health reply
    }

    public func allClosed() -> Bool { stillOpen().isEmpty }

    public func stillOpen() -> [String: Int] {
        var left: [String: Int] = [:]
        for (name, group) in [("header", headers), ("body", bodies), ("idle", idle)] {
            let n = group.filter { !$0.closedByServer() }.count
            if n > 0 { left[name] = n }
        }
        return left
    }
}

/// An IPv4 socket address (`host` in dotted form) for bind(2) and connect(2).
public func ipv4Address(_ host: String, port: UInt16) -> sockaddr_in {
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = inet_addr(host)
    return addr
}
