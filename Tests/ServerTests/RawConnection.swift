import Foundation
import Protocol
#if canImport(Glibc)
import Glibc
#endif

/// One TCP connection to a loopback server on which a test writes HTTP byte for byte:
/// the requests no client library sends (a Content-Length of 2^64, a chunk size that is
/// not hex, a body cut off mid-way). Every wait has a deadline, so a server that never
/// answers costs a bounded wait, not a hung test. Used by one thread.
final class RawConnection {
    private var fd: Int32

    init(port: UInt16, host: String = "127.0.0.1") throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(String(cString: strerror(errno)))") }
        // A server that stops reading must not block a send for ever.
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var addr = ipv4Address(host, port: port)
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let e = errno
            Glibc.close(fd)
            fd = -1
            throw TestFailure("connect to \(host):\(port): \(String(cString: strerror(e)))")
        }
    }

    deinit { close() }

    /// Writes all of `bytes`; false when the server closed the connection or stopped
    /// reading first (it may have answered already: the reply is still there to read).
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    /// Nothing more from this side: the server reads end of file, as from a client that
    /// went away (mid-body, when the request declared more).
    func finishSending() { shutdown(fd, Int32(SHUT_WR)) }

    /// The next reply (after any `1xx`): complete when its declared body arrived, else
    /// what came before the server closed or `timeout` seconds passed; nil when not even
    /// a status line came. `head`: a reply to HEAD, whose Content-Length has no body.
    func reply(timeout: Double, head: Bool = false) -> RawReply? {
        var buffer: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let reply = RawReply(buffer, head: head) {
                if (100..<200).contains(reply.status) {
                    buffer.removeFirst(reply.headLength)
                    continue
                }
                if reply.complete { return reply }
            }
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return RawReply(buffer, head: head) }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&p, 1, Int32(left * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { return RawReply(buffer, head: head) }
            let n = recv(fd, &chunk, chunk.count, 0)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return RawReply(buffer, head: head) }
            buffer += chunk[0..<n]
        }
    }

    /// Closes at once; with `reset`, with an RST (SO_LINGER 0), as a client killed mid-request.
    func close(reset: Bool = false) {
        guard fd >= 0 else { return }
        if reset {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        }
        Glibc.close(fd)
        fd = -1
    }
}

/// A reply read off a raw connection.
struct RawReply {
    let status: Int
    /// The status line and headers, as sent.
    let headText: String
    let headLength: Int
    let body: [UInt8]
    /// False when the connection ended (or the wait did) before the declared body.
    let complete: Bool

    /// Parses the start of `bytes`; nil without a whole head and a status line.
    init?(_ bytes: [UInt8], head: Bool) {
        let end = [UInt8]("\r\n\r\n".utf8)
        guard bytes.count >= 4, let at = (0...(bytes.count - 4)).first(where: { bytes[$0..<($0 + 4)].elementsEqual(end) }) else { return nil }
        headText = String(decoding: bytes[..<at], as: UTF8.self)
        let statusLine = headText.split(separator: "\r\n", maxSplits: 1).first ?? ""
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/"), let code = Int(parts[1]) else { return nil }
        status = code
        headLength = at + 4
        let declared = headText.split(separator: "\r\n").dropFirst().compactMap { line -> Int? in
            let pair = line.split(separator: ":", maxSplits: 1)
            guard pair.count == 2, pair[0].lowercased() == "content-length" else { return nil }
            return Int(pair[1].trimmingCharacters(in: .whitespaces))
        }.first
        let rest = Array(bytes[headLength...])
        if head || status == 204 || status == 304 || (100..<200).contains(status) {
            body = []
            complete = true
        } else if let declared {
            body = Array(rest.prefix(declared))
            complete = rest.count >= declared
        } else {
            body = rest
            complete = false
        }
    }

    func header(_ name: String) -> String? {
        for line in headText.split(separator: "\r\n").dropFirst() {
            let pair = line.split(separator: ":", maxSplits: 1)
            if pair.count == 2, pair[0].lowercased() == name.lowercased() { return pair[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }

    var text: String { String(decoding: body, as: UTF8.self) }
    var error: ErrorResponse? { try? WireJSON.decode(ErrorResponse.self, from: body) }
}
