import Foundation
import Postgres
import Storage

/// The scaled records: PostgreSQL, shared by every server process of a workspace.
///
/// Concurrency: each record operation borrows a pooled connection. Transactions run
/// SERIALIZABLE and are run again when PostgreSQL aborts one for colliding with
/// another process's (SQLSTATE 40001/40P01), or when a unique constraint caught two
/// processes inserting the same row at once (23505: the second run reads the row the
/// other inserted). So two processes recording the same file, block or upload at once
/// end with one row, as one process does under SQLite's single writer; and the change
/// feed's `MAX(sequence) + 1` stays gap-free in commit order (a PostgreSQL SEQUENCE
/// would let a reader see sequence 7 committed before 6, and skip 6 forever).
///
/// Availability: a connection lost mid-operation (the server restarted) is dropped with
/// every idle one, and the operation runs again on a new connection; when no
/// connection can be made the operation throws `RecordsUnavailable` (a 503 to the
/// client, who retries).
final class PostgresRecords: RecordStore {
    let pool: PostgresPool
    let location: String
    var dialect: SQLDialect { .postgres }

    /// Connections per server process: a few more than the 2 cores' worth of busy
    /// threads, since a thread streaming a block holds none.
    static let defaultPoolSize = 8

    init(connectionString: String, poolSize: Int = PostgresRecords.defaultPoolSize) throws {
        pool = PostgresPool(connectionString: connectionString, size: poolSize)
        location = DatabaseLocation.redacted(connectionString)
        // Fail at start, with libpq's reason, rather than at the first request.
        do {
            pool.giveBack(try pool.borrow())
        } catch {
            // libpq gives no SQLSTATE for a refused login; a server that answers a ping refused us, not went away.
            if PostgresProbe.ping(connectionString) == .accepting {
                throw PostgresError(sqlState: "28000", message: error.message, connectionLost: false)
            }
            throw error
        }
    }

    func withSession<T>(_ body: (any RecordSession) throws -> T) throws -> T {
        var lost = 0
        while true {
            let connection: PostgresConnection
            do { connection = try pool.borrow() } catch {
                throw RecordsUnavailable(location: location, reason: error.message)
            }
            do {
                let result = try body(PostgresSession(connection: connection))
                pool.giveBack(connection)
                return result
            } catch let error as PostgresError where error.isUnavailable {
                pool.discard(connection)
                lost += 1
                // Once on a fresh connection (the old ones died with the server); then the client retries.
                if lost >= 2 { throw RecordsUnavailable(location: location, reason: error.message) }
            } catch {
                pool.giveBack(connection)
                throw error
            }
        }
    }

    /// One transaction for all the migrations, under an advisory lock, so that two
    /// processes starting at once on a fresh database apply each migration once.
    func migrate(_ migrations: [RecordMigration]) throws {
        try withSession { session in
            let connection = (session as! PostgresSession).connection
            try connection.execute("BEGIN")
            do {
                try connection.execute("SELECT pg_advisory_xact_lock(\(Self.migrationLock))")
                try connection.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT COLLATE \"C\" PRIMARY KEY, applied_at BIGINT NOT NULL)")
                let applied = Set(try Self.names(connection))
                let unknown = applied.subtracting(migrations.map(\.name))
                if !unknown.isEmpty { throw MigrationError.newerSchema(path: location, unknown: unknown.sorted()) }
                for migration in migrations where !applied.contains(migration.name) {
                    try connection.execute(migration.postgres)
                    try connection.execute("INSERT INTO schema_migrations(name, applied_at) VALUES ($1, extract(epoch from now())::bigint)", [.text(migration.name)])
                }
                try connection.execute("COMMIT")
            } catch {
                if connection.isHealthy { _ = try? connection.execute("ROLLBACK") }
                throw error
            }
        }
    }

    func appliedMigrations() throws -> [String] {
        try withSession { session in
            let connection = (session as! PostgresSession).connection
            let exists = try connection.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").text(0, 0) == "t"
            return exists ? try Self.names(connection) : []
        }
    }

    private static func names(_ connection: PostgresConnection) throws -> [String] {
        let result = try connection.execute("SELECT name FROM schema_migrations ORDER BY name")
        return (0..<result.rowCount).map { result.text($0, 0) ?? "" }
    }

    /// The advisory lock key of migrations ("vdrive" in ASCII).
    static let migrationLock: Int64 = 0x7664_7269_7665
}

/// A borrowed connection as a record session.
struct PostgresSession: RecordSession {
    let connection: PostgresConnection
    var dialect: SQLDialect { .postgres }

    /// Collisions with other processes' transactions are retried this many times.
    static let maxTransactionRuns = 20

    func run(_ sql: String, arguments: [SQLBindable]) throws -> Int {
        try connection.execute(Self.numbered(sql), arguments.map(Self.parameter)).affectedRows
    }

    func query<T>(_ sql: String, arguments: [SQLBindable], row: (any RecordRow) throws -> T) throws -> [T] {
        let result = try connection.execute(Self.numbered(sql), arguments.map(Self.parameter))
        var out: [T] = []
        out.reserveCapacity(result.rowCount)
        for i in 0..<result.rowCount { out.append(try row(PostgresRow(result: result, index: i))) }
        return out
    }

    func transaction<T>(_ body: () throws -> T) throws -> T {
        var runs = 0
        while true {
            runs += 1
            try connection.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            do {
                let result = try body()
                try connection.execute("COMMIT")
                return result
            } catch {
                if connection.isHealthy { _ = try? connection.execute("ROLLBACK") }
                guard let e = error as? PostgresError, e.isSerializationFailure || e.isUniqueViolation, runs < Self.maxTransactionRuns else { throw error }
                // A jittered pause that doubles up to 128 ms ("full jitter"), so that the
                // colliding transactions do not collide again: with a few writers on one hot
                // row (the sequence floor) pauses of at most 20 ms let one lose 20 times running.
                usleep(UInt32.random(in: 0...(UInt32(1000) << UInt32(min(runs, 7)))))
            }
        }
    }

    static func parameter(_ value: SQLBindable) -> PostgresParameter? {
        switch value.sqlValue {
        case .null: return nil
        case .integer(let v): return .text(String(v))
        case .real(let v): return .text(String(v))
        case .text(let s): return .text(s)
        case .blob(let b): return .bytes(b)
        }
    }

    /// SQLite's placeholders in PostgreSQL's form: `?` → `$1, $2, …` in order, `?N` → `$N`.
    /// Question marks inside quoted literals stay.
    static func numbered(_ sql: String) -> String {
        var out = ""
        out.reserveCapacity(sql.utf8.count + 8)
        var next = 1
        var quoted = false
        var chars = sql.makeIterator()
        var pending: Character? = chars.next()
        while let c = pending {
            pending = chars.next()
            if c == "'" { quoted.toggle() }
            guard c == "?", !quoted else { out.append(c); continue }
            var digits = ""
            while let d = pending, d.isASCII, d.isNumber {
                digits.append(d)
                pending = chars.next()
            }
            if digits.isEmpty {
                out += "$\(next)"
                next += 1
            } else {
                out += "$" + digits
            }
        }
        return out
    }
}

/// One row of a PostgreSQL result (text format).
struct PostgresRow: RecordRow {
    let result: PostgresResult
    let index: Int

    func isNull(_ i: Int32) -> Bool { result.isNull(index, Int(i)) }
    func int64(_ i: Int32) -> Int64 {
        guard let text = result.text(index, Int(i)) else { return 0 }
        if let n = Int64(text) { return n }
        return text == "t" ? 1 : 0
    }
    func string(_ i: Int32) -> String? { result.text(index, Int(i)) }
    func bytes(_ i: Int32) -> [UInt8]? { result.bytes(index, Int(i)) }
}
