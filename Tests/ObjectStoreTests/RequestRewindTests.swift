import Foundation
import HTTPClient
import Synchronization
import Testing
import TestTraits
#if canImport(Glibc)
import Glibc
#endif

/// A request body sent again: libcurl retries a request on a new connection when the
/// kept-alive one dies under it (a restarted server, an idle timeout), and needs the body
/// from its start again.
@Suite(.tags(.logic)) struct RequestRewindTests {
    /// A server on loopback that answers the first request and keeps the connection,
    /// reads the second request then closes without an answer, and answers it on a new
    /// connection, where it must arrive whole.
    @Test func aBodyFromAFileIsSentAgainWholeOnANewConnection() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        try #require(bound == 0 && listen(listener, 4) == 0)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        let port = UInt16(bigEndian: address.sin_port)

        let body = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let path = NSTemporaryDirectory() + "vdrive-rewind-\(getpid())"
        _ = FileManager.default.createFile(atPath: path, contents: Data(body))
        defer { unlink(path) }
        let fd = open(path, O_RDONLY)
        try #require(fd >= 0)
        defer { close(fd) }

        let received = Mutex<[UInt8]?>(nil)
        let server = Thread {
            let first = accept(listener, nil, nil)
            guard first >= 0 else { return }
            _ = Self.readRequest(first)
            Self.send(first, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            // The second request on the kept connection, read whole, then the connection
            // closed without an answer: to the client, a kept connection that died before
            // its answer began, which libcurl sends again on a new one.
            _ = Self.readRequest(first)
            close(first)
            let second = accept(listener, nil, nil)
            guard second >= 0 else { return }
            received.withLock { $0 = Self.readRequest(second) }
            Self.send(second, "HTTP/1.1 204 No Content\r\n\r\n")
            close(second)
        }
        server.start()

        let connection = HTTPConnection()
        let url = "http://127.0.0.1:\(port)/upload"
        #expect(try connection.perform(method: "GET", url: url).status == 200)
        // "Expect:" off, as the uploads send it: the body follows its head at once.
        let answer = try connection.perform(method: "PUT", url: url, headers: ["Expect:"], body: .file(fd: fd, offset: 0, length: Int64(body.count)))
        #expect(answer.status == 204)
        #expect(received.withLock { $0 } == body, "the body arrives whole on the new connection")
    }

    /// Reads one request (head, then a body of Content-Length bytes) and returns its body.
    static func readRequest(_ fd: Int32) -> [UInt8]? {
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var bodyStart: Int?
        var wanted = 0
        while true {
            if bodyStart == nil, let end = data.firstRange(of: Array("\r\n\r\n".utf8))?.upperBound {
                bodyStart = end
                let head = String(decoding: data[..<end], as: UTF8.self).lowercased()
                if let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }) {
                    wanted = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) ?? 0
                }
            }
            if let start = bodyStart, data.count - start >= wanted { return Array(data[start..<(start + wanted)]) }
            let n = read(fd, &chunk, chunk.count)
            if n <= 0 { return nil }
            data += chunk[0..<n]
        }
    }

    static func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
