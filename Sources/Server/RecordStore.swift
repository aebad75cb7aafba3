import Storage

/// The records interface: where the server's records (devices, blocks, contents,
/// uploads, file versions, settings) live. Two implementations, chosen at start:
/// `SQLiteRecords` (one file in the data folder, the embedded default) and
/// `PostgresRecords` (a pool of connections to a PostgreSQL server that several server
/// processes share).
///
/// The shape is a thin SQL session, not a protocol with one method per record
/// operation: the record operations (Metadata.swift and the files it names) are
/// written once, in the SQL both databases speak, and say `session.dialect` only where
/// the two differ (Docs/architecture.md, "Records", lists where and why).
protocol RecordStore: Sendable {
    var dialect: SQLDialect { get }
    /// Where the records are, for messages (a path, or a URL without its password).
    var location: String { get }
    /// Runs `body` on a session of its own (a pooled connection for PostgreSQL, the one
    /// connection under its mutex for SQLite). PostgreSQL: a connection lost in the
    /// middle (server restarted) is replaced and `body` runs again, so `body` must be
    /// safe to repeat (every record operation is: each is one statement or one
    /// transaction); when no connection can be made, throws `RecordsUnavailable`.
    func withSession<T>(_ body: (any RecordSession) throws -> T) throws -> T
    /// Applies the migrations not yet applied (each in its dialect's body).
    func migrate(_ migrations: [RecordMigration]) throws
    /// Names of the applied migrations, in order (empty for a fresh database).
    func appliedMigrations() throws -> [String]
}

enum SQLDialect: String, Sendable {
    case sqlite = "SQLite"
    case postgres = "PostgreSQL"
}

/// A connection's worth of SQL: statements with `?` (or `?N`) placeholders, the same
/// text for both databases except where `dialect` is consulted.
protocol RecordSession {
    var dialect: SQLDialect { get }
    /// Runs one statement; returns the number of rows it changed.
    func run(_ sql: String, arguments: [SQLBindable]) throws -> Int
    func query<T>(_ sql: String, arguments: [SQLBindable], row: (any RecordRow) throws -> T) throws -> [T]
    /// One transaction: committed when `body` returns, rolled back when it throws.
    /// PostgreSQL runs it SERIALIZABLE and runs `body` again when it collides with
    /// another server process's transaction, so `body` reads what it decides on
    /// inside the transaction and does nothing but SQL.
    func transaction<T>(_ body: () throws -> T) throws -> T
}

/// One row of a result, read by column index.
protocol RecordRow {
    func isNull(_ i: Int32) -> Bool
    func int64(_ i: Int32) -> Int64
    func string(_ i: Int32) -> String?
    func bytes(_ i: Int32) -> [UInt8]?
}

extension RecordRow {
    func int(_ i: Int32) -> Int { Int(int64(i)) }
    func optionalInt64(_ i: Int32) -> Int64? { isNull(i) ? nil : int64(i) }
}

extension Row: RecordRow {}

extension RecordSession {
    @discardableResult
    func run(_ sql: String, _ arguments: SQLBindable...) throws -> Int { try run(sql, arguments: arguments) }

    func query<T>(_ sql: String, _ arguments: SQLBindable..., row: (any RecordRow) throws -> T) throws -> [T] {
        try query(sql, arguments: arguments, row: row)
    }

    /// The first row, or nil.
    func queryOne<T>(_ sql: String, _ arguments: SQLBindable..., row: (any RecordRow) throws -> T) throws -> T? {
        try query(sql, arguments: arguments, row: row).first
    }

    /// A set of hashes as a one-column table `j(value)` from one parameter, so 10,000
    /// hashes are one statement: SQLite walks a JSON array (`json_each`), PostgreSQL
    /// unnests a text array (cheaper than parsing jsonb; measured in Docs/benchmarks.md).
    /// The hashes are validated lowercase hex, so neither form needs quoting.
    func hashTable(_ hashes: [String]) -> (sql: String, argument: String) {
        switch dialect {
        case .sqlite: return ("json_each(?) j", hashes.isEmpty ? "[]" : "[\"" + hashes.joined(separator: "\",\"") + "\"]")
        case .postgres: return ("unnest(?::text[]) AS j(value)", "{" + hashes.joined(separator: ",") + "}")
        }
    }
}

/// The records are out of reach (the PostgreSQL server is down, restarting, or
/// unreachable): a request that needed them gets 503 and the client tries again.
struct RecordsUnavailable: Error, CustomStringConvertible {
    let location: String
    let reason: String
    var description: String { "the records database \(location) is unavailable: \(reason)" }
}
