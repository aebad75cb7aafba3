import Foundation
import Postgres
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The commits of the other server processes on the same PostgreSQL, for the long
/// poll: one connection of its own (not from the pool) that `LISTEN`s on
/// `ChangeFeed.channel`, and one thread that waits on its socket with poll(2) and turns
/// each notification into `ChangeNotifier.changed` of the feed it names.
///
/// A connection lost (PostgreSQL restarted, the network cut) is made again, with a
/// growing pause of up to two seconds between tries; once it listens again every held
/// request is checked (`changedAll`): a commit's notification may have been sent while
/// nobody listened. The same holds for the first connection, made after the server
/// began serving. A connection quiet for `pingSeconds` runs `SELECT 1`, so one that
/// died silently (a host gone, no reset) is noticed too.
final class ChangeListener: Sendable {
    private let connectionString: String
    private let notifier: ChangeNotifier
    /// The pipe `stop` writes to, to end the thread's poll.
    private let wakeRead: Int32, wakeWrite: Int32
    private let ended = Mutex(false)
    private let done = DispatchSemaphore(value: 0)
    /// Connections made so far (tests and the log tell a reconnection by it).
    let connections = Atomic<Int>(0)
    static let pingSeconds: Int32 = 30

    init(connectionString: String, notifier: ChangeNotifier) {
        self.connectionString = connectionString
        self.notifier = notifier
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        } else {
            fds = [-1, -1]  // then `stop` waits for the next ping instead
        }
        wakeRead = fds[0]; wakeWrite = fds[1]
        Thread(named: "vd-pg-listen", stackSize: 1 << 20) { [self] in
            loop()
            done.signal()
        }.start()
    }

    /// Ends the thread and closes its connection. Idempotent.
    func stop() {
        let first = ended.withLock { was -> Bool in
            defer { was = true }
            return !was
        }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        done.wait()
        close(wakeRead)
        close(wakeWrite)
    }

    private var stopping: Bool { ended.withLock { $0 } }

    private func loop() {
        var pause: Int32 = 0
        var lostOnce = false
        while !stopping {
            if pause > 0 {
                if waitForStop(milliseconds: pause) { return }
            }
            let connection: PostgresConnection
            do throws(PostgresError) {
                connection = try PostgresConnection(connectionString)
                try connection.execute("LISTEN \(ChangeFeed.channel)")
            } catch {
                if !lostOnce {
                    ServerLog.note("cannot listen for other server processes' changes (\(error.message)); held polls wait for their deadline until this works, trying again")
                    lostOnce = true
                }
                pause = min(2000, max(100, pause * 2))
                continue
            }
            if lostOnce { ServerLog.note("listening for other server processes' changes again") }
            lostOnce = false
            pause = 0
            connections.add(1, ordering: .relaxed)
            notifier.changedAll()
            if let error = listen(on: connection) {
                ServerLog.note("lost the connection that listens for other server processes' changes (\(error.message)); reconnecting")
                lostOnce = true
                pause = 100
            }
        }
    }

    /// Hands notifications to the notifier until the connection breaks (its error) or
    /// `stop` (nil).
    private func listen(on connection: PostgresConnection) -> PostgresError? {
        var fds = [pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        while true {
            fds[0].revents = 0; fds[1].revents = 0
            let ready = poll(&fds, 2, Self.pingSeconds * 1000)
            if ready < 0 {
                if errno == EINTR { continue }
                return PostgresError(sqlState: nil, message: "poll: \(String(cString: strerror(errno)))", connectionLost: true)
            }
            if fds[1].revents != 0 { return nil }
            do throws(PostgresError) {
                if ready == 0 {
                    try connection.execute("SELECT 1")
                } else {
                    try connection.consumeInput()
                }
            } catch {
                return error
            }
            for notification in connection.notifications() where notification.channel == ChangeFeed.channel {
                // A feed this build does not know (a newer process's): check them all.
                if let feed = ChangeFeed(rawValue: notification.payload) { notifier.changed(feed) } else { notifier.changedAll() }
            }
        }
    }

    /// Sleeps `milliseconds` unless `stop` is called first (then true).
    private func waitForStop(milliseconds: Int32) -> Bool {
        var fd = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
        return poll(&fd, 1, milliseconds) > 0
    }
}
