import CMicroHTTPD  // its headers bring <sys/socket.h>'s socket types, as for HTTPDaemon
import Foundation

/// Wakes libmicrohttpd's epoll threads by opening and closing a connection to the
/// server's own listening socket, which is in every thread's epoll set.
///
/// Why: libmicrohttpd 0.9.75 reads at most 128 epoll events per `epoll_wait` and, when it
/// gets exactly 128, calls `epoll_wait` again with the loop's timeout before it serves
/// them (daemon.c, `MHD_epoll`): with nothing else arriving, 128 connections whose
/// requests came together (devices polling again after a record, kept-alive uploads)
/// wait up to the idle timeout, 30 s. The connection guard sees their bytes unread
/// (`ConnectionRecord.peek`) and knocks; the knock's connection event ends the second
/// wait, and the thread serves them. The knock's connection carries no request and is
/// closed at once. SlowClientTests.requestsReadyTogetherAreServedAtOnce shows the stall.
struct ListenerKnock: Sendable {
    private let address: sockaddr_in

    /// The listening socket's bound address; a wildcard address is knocked on through loopback.
    init(listeningAt bound: sockaddr_in) {
        var addr = bound
        if addr.sin_addr.s_addr == INADDR_ANY { addr.sin_addr.s_addr = UInt32(INADDR_LOOPBACK).bigEndian }
        address = addr
    }

    /// One knock: a non-blocking connect, then close. Nothing waits for it.
    func knock() {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return }
        var addr = address
        _ = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
    }
}
