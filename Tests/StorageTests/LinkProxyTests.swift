import Testing
import TestTraits
import Foundation
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The test support's delaying, rate-capping proxy forwards every byte intact, both ways.
/// (Its delay and rate are measured by the benchmarks, never asserted here.)
@Suite(.tags(.logic)) struct LinkProxyTests {
    @Test func forwardsBothWaysIntact() throws {
        // An echo server on a free loopback port.
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(server, 1)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(server, $0, &len) } }
        let echo = Thread {
            let c = accept(server, nil, nil)
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(c, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                _ = buffer.withUnsafeBytes { write(c, $0.baseAddress, n) }
            }
            close(c)
        }
        echo.start()
        let proxy = try LinkProxy(targetPort: UInt16(bigEndian: addr.sin_port), oneWayDelay: 0.005, bytesPerSecond: 50e6)
        defer { proxy.stop(); close(server) }

        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        var target = sockaddr_in()
        target.sin_family = sa_family_t(AF_INET)
        target.sin_port = proxy.port.bigEndian
        target.sin_addr.s_addr = inet_addr("127.0.0.1")
        let rc = withUnsafePointer(to: &target) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        #expect(rc == 0)
        let payload = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2654435761 >> 7) }
        let sender = Thread {
            var off = 0
            while off < payload.count {
                let n = payload.withUnsafeBytes { write(client, $0.baseAddress! + off, payload.count - off) }
                if n <= 0 { break }
                off += n
            }
            shutdown(client, Int32(SHUT_WR))
        }
        sender.start()
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        #expect(received == payload)
    }
}
