/// Postgres: a small Swift wrapper of libpq, the PostgreSQL client library.
///
/// Terms: a `PostgresConnection` is one libpq connection (`PGconn`); `execute` runs
/// one statement with parameters (`PQexecParams`, text results) or, without
/// parameters, a script of several statements (`PQexec`); a `PostgresResult` holds
/// the rows. Errors carry the server's own message and its SQLSTATE, so a caller can
/// tell "retry this transaction" (40001) from "the row exists" (23505) from "the
/// server is gone" (a broken connection, no SQLSTATE). A connection that `LISTEN`s
/// hands out `NOTIFY`s (`PostgresNotification`) read from its `socket` when it is
/// readable (`consumeInput`, `notifications`).
/// Thread safety: a connection is used by one thread at a time; its owner (a pool)
/// hands it out. Imports: CPostgres only; nothing of the server.
import CPostgres

/// A failed libpq call: the server's message, its SQLSTATE (nil when the failure is
/// the connection's: refused, reset, the server shut down), and the SQL at fault.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    public let sqlState: String?
    public let message: String
    public let detail: String?
    public let sql: String?
    /// The connection is unusable after this failure (reconnect before the next call).
    public let connectionLost: Bool

    public init(sqlState: String?, message: String, detail: String? = nil, sql: String? = nil, connectionLost: Bool) {
        self.sqlState = sqlState; self.message = message; self.detail = detail; self.sql = sql; self.connectionLost = connectionLost
    }

    public var description: String {
        var text = "PostgreSQL"
        if let sqlState { text += " error \(sqlState)" }
        text += ": " + message
        if let detail { text += " (\(detail))" }
        if let sql { text += " (in: \(sql.count > 200 ? String(sql.prefix(200)) + "…" : sql))" }
        return text
    }

    /// Two transactions collided (serialization failure or deadlock): run it again.
    public var isSerializationFailure: Bool { sqlState == "40001" || sqlState == "40P01" }
    public var isUniqueViolation: Bool { sqlState == "23505" }
    /// Class 28 (invalid authorization) and 42501 (insufficient privilege).
    public var isPermissionDenied: Bool { sqlState?.hasPrefix("28") == true || sqlState == "42501" }
    /// Class 08 (connection exception), 57P01..03 (admin shutdown, crash shutdown,
    /// cannot connect now), or a connection libpq reports as broken.
    public var isUnavailable: Bool {
        connectionLost || sqlState?.hasPrefix("08") == true || ["57P01", "57P02", "57P03"].contains(sqlState ?? "")
    }
}
