import CPostgres

/// One parameter of a statement: text (libpq sends it as text and the server infers
/// the type from its place in the SQL), or bytes (sent in binary, for bytea).
public enum PostgresParameter: Sendable, Equatable {
    case text(String)
    case bytes([UInt8])
}

/// One connection to a PostgreSQL server.
/// `@unchecked Sendable`: libpq's `PGconn` is not thread-safe; the owner (a pool)
/// gives a connection to one thread at a time.
public final class PostgresConnection: @unchecked Sendable {
    let handle: OpaquePointer
    public let connectionString: String

    /// Connects. `connectionString` is a libpq connection URI
    /// (`postgresql://user@host:port/db?host=/socket/dir`) or `key=value` pairs.
    public init(_ connectionString: String) throws(PostgresError) {
        self.connectionString = connectionString
        guard let conn = PQconnectdb(connectionString) else {
            throw PostgresError(sqlState: nil, message: "libpq could not allocate a connection", connectionLost: true)
        }
        if PQstatus(conn) != CONNECTION_OK {
            let message = Self.message(of: conn)
            PQfinish(conn)
            throw PostgresError(sqlState: nil, message: message, connectionLost: true)
        }
        handle = conn
        // Notices (e.g. "relation already exists, skipping") go nowhere, not to stderr.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
    }

    deinit { PQfinish(handle) }

    /// False once the connection broke (server restarted, network gone).
    public var isHealthy: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Reconnects with the same parameters.
    public func reset() throws(PostgresError) {
        PQreset(handle)
        guard PQstatus(handle) == CONNECTION_OK else {
            throw PostgresError(sqlState: nil, message: Self.message(of: handle), connectionLost: true)
        }
    }

    /// The server's version as PostgreSQL numbers it (150018 for 15.18).
    public var serverVersion: Int { Int(PQserverVersion(handle)) }

    /// Runs one statement with `$1…$n` parameters (nil is NULL); rows come back as text.
    @discardableResult
    public func execute(_ sql: String, _ parameters: [PostgresParameter?]) throws(PostgresError) -> PostgresResult {
        // libpq wants C strings that live through the call: one buffer per parameter.
        var buffers: [[CChar]?] = []
        var lengths: [Int32] = []
        var formats: [Int32] = []
        buffers.reserveCapacity(parameters.count)
        for parameter in parameters {
            switch parameter {
            case nil:
                buffers.append(nil); lengths.append(0); formats.append(0)
            case .text(let s):
                buffers.append(Array(s.utf8CString)); lengths.append(0); formats.append(0)
            case .bytes(let b):
                buffers.append(b.map { CChar(bitPattern: $0) }); lengths.append(Int32(b.count)); formats.append(1)
            }
        }
        let result: OpaquePointer? = withPointers(buffers) { pointers in
            PQexecParams(handle, sql, Int32(parameters.count), nil, pointers, lengths, formats, 0)
        }
        return try check(result, sql: sql)
    }

    /// Runs a script of one or more statements without parameters (DDL, BEGIN, COMMIT).
    @discardableResult
    public func execute(_ sql: String) throws(PostgresError) -> PostgresResult {
        try check(PQexec(handle, sql), sql: sql)
    }

    private func check(_ result: OpaquePointer?, sql: String) throws(PostgresError) -> PostgresResult {
        guard let result else {
            throw PostgresError(sqlState: nil, message: Self.message(of: handle), sql: sql, connectionLost: !isHealthy)
        }
        let status = PQresultStatus(result)
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY {
            return PostgresResult(result)
        }
        func field(_ code: Int32) -> String? { PQresultErrorField(result, code).map { String(cString: $0) } }
        let sqlState = field(vd_pg_diag_sqlstate())
        let message = field(vd_pg_diag_message_primary()) ?? Self.message(of: handle)
        let detail = field(vd_pg_diag_message_detail())
        PQclear(result)
        throw PostgresError(sqlState: sqlState, message: message, detail: detail, sql: sql, connectionLost: !isHealthy)
    }

    private func withPointers<R>(_ buffers: [[CChar]?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        var pointers: [UnsafePointer<CChar>?] = []
        pointers.reserveCapacity(buffers.count)
        func next(_ i: Int) -> R {
            if i == buffers.count { return body(pointers) }
            guard let buffer = buffers[i] else {
                pointers.append(nil)
                return next(i + 1)
            }
            return buffer.withUnsafeBufferPointer { p in
                pointers.append(p.baseAddress)
                return next(i + 1)
            }
        }
        return next(0)
    }

    static func message(of conn: OpaquePointer) -> String {
        guard let p = PQerrorMessage(conn) else { return "unknown libpq error" }
        var text = String(cString: p)
        while text.last == "\n" || text.last == " " { text.removeLast() }
        return text.isEmpty ? "unknown libpq error" : text.replacingNewlines()
    }
}

extension String {
    /// libpq's messages span lines ("connection to server … failed: …\n\tIs the server running…"): one line for logs.
    func replacingNewlines() -> String {
        String(self.map { $0 == "\n" || $0 == "\t" ? " " : $0 }).split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }
}

/// What libpq can tell without logging in: is the connection string well formed, and
/// does a server answer at that address.
public enum PostgresProbe {
    public enum Reachability: Sendable, Equatable {
        /// A server answers and accepts connections (logging in may still fail).
        case accepting
        /// A server answers but refuses connections now (starting up, shutting down).
        case rejecting
        /// Nothing answers at that address.
        case noResponse
        /// The connection string is not valid; the reason.
        case badParameters(String)
    }

    /// Checks the form of a connection string (URI or key=value); nil when valid, else libpq's reason.
    public static func parseError(_ connectionString: String) -> String? {
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &error) else {
            let message = error.map { String(cString: $0).replacingNewlines() } ?? "not a connection string"
            if let error { PQfreemem(error) }
            return message
        }
        defer { PQconninfoFree(options) }
        // libpq checks a port's digits only when it connects, and then reports "could not
        // connect" as for a server that is down; a malformed port is the URL's fault.
        var option = options
        while let keyword = option.pointee.keyword {
            if String(cString: keyword) == "port", let value = option.pointee.val {
                let ports = String(cString: value)
                if !ports.split(separator: ",", omittingEmptySubsequences: false).allSatisfy({ $0.isEmpty || ($0.allSatisfy(\.isNumber) && Int($0).map { $0 > 0 && $0 < 65536 } == true) }) {
                    return "invalid port '\(ports)': a number from 1 to 65535"
                }
            }
            option += 1
        }
        return nil
    }

    public static func ping(_ connectionString: String) -> Reachability {
        if let error = parseError(connectionString) { return .badParameters(error) }
        switch PQping(connectionString) {
        case PQPING_OK: return .accepting
        case PQPING_REJECT: return .rejecting
        case PQPING_NO_ATTEMPT: return .badParameters("libpq made no attempt to connect (bad parameters)")
        default: return .noResponse
        }
    }
}
