import Foundation
import Postgres

/// A small pool of PostgreSQL connections: libmicrohttpd runs one thread per HTTP
/// connection, and each borrows a database connection for one record operation (a
/// statement or a transaction), then gives it back. At most `size` are open; a thread
/// that finds none free waits for one. Connections are made on demand, so an idle
/// server holds one or two.
/// `@unchecked Sendable`: every field is guarded by `condition`.
final class PostgresPool: @unchecked Sendable {
    let connectionString: String
    let size: Int
    private let condition = NSCondition()
    private var idle: [PostgresConnection] = []
    private var open = 0

    init(connectionString: String, size: Int) {
        self.connectionString = connectionString
        self.size = max(1, size)
    }

    /// A connection for this thread; made if none is idle and fewer than `size` are open.
    /// Throws the connection error when a new one cannot be made.
    func borrow() throws(PostgresError) -> PostgresConnection {
        condition.lock()
        while idle.isEmpty && open >= size { condition.wait() }
        if let connection = idle.popLast() {
            condition.unlock()
            return connection
        }
        open += 1
        condition.unlock()
        do {
            return try PostgresConnection(connectionString)
        } catch {
            condition.withLock { open -= 1; condition.signal() }
            throw error
        }
    }

    func giveBack(_ connection: PostgresConnection) {
        condition.withLock {
            if connection.isHealthy { idle.append(connection) } else { open -= 1 }
            condition.signal()
        }
    }

    /// Drops a broken connection, and with it every idle one: when the server went away
    /// (restart, failover) they are all broken, and libpq only notices on their next use.
    func discard(_ connection: PostgresConnection) {
        condition.withLock {
            open -= 1 + idle.count
            idle.removeAll()
            condition.broadcast()
        }
    }

    /// Closes the idle connections (server stop); borrowed ones close when given back.
    func closeIdle() {
        condition.withLock {
            open -= idle.count
            idle.removeAll()
        }
    }
}
