import CPostgres

/// One `NOTIFY channel, 'payload'` (or `pg_notify`) received on a connection that
/// `LISTEN`s on the channel. PostgreSQL delivers it when the notifying transaction
/// commits, never for one rolled back.
public struct PostgresNotification: Sendable, Equatable {
    public let channel: String
    public let payload: String
    /// The server process of the session that sent it.
    public let processID: Int32

    public init(channel: String, payload: String, processID: Int32) {
        self.channel = channel; self.payload = payload; self.processID = processID
    }
}

/// Waiting for notifications without a thread blocked in libpq: `LISTEN` with
/// `execute`, then wait on `socket` with poll(2); when it is readable, `consumeInput`
/// reads what arrived and `notifications` hands it out.
extension PostgresConnection {
    /// The connection's socket, to wait on for input; -1 when the connection is closed.
    public var socket: Int32 { PQsocket(handle) }

    /// Reads whatever the server sent, without blocking. Throws when the connection
    /// broke (the server went away: reconnect).
    public func consumeInput() throws(PostgresError) {
        if PQconsumeInput(handle) == 0 || !isHealthy {
            throw PostgresError(sqlState: nil, message: Self.message(of: handle), connectionLost: true)
        }
    }

    /// The notifications read so far (by `consumeInput` or during a statement), oldest
    /// first; each is handed out once.
    public func notifications() -> [PostgresNotification] {
        var out: [PostgresNotification] = []
        while let notify = PQnotifies(handle) {
            let n = notify.pointee
            out.append(PostgresNotification(channel: n.relname.map { String(cString: $0) } ?? "",
                                            payload: n.extra.map { String(cString: $0) } ?? "", processID: n.be_pid))
            PQfreemem(notify)
        }
        return out
    }
}
