/// Named schema migrations, recorded in `schema_migrations` and applied once, in order.
/// A migration that has shipped is never edited; a change is a new migration.
public struct Migration: Sendable {
    public let name: String
    public let sql: String
    /// Work SQL cannot do (hashing, splitting files), run after `sql` in the same
    /// transaction. It must be safe to run again after a kill: files it writes are
    /// content-addressed, and files it removes are removed only by the caller after
    /// the transaction committed (or left for a sweep).
    public let code: (@Sendable (Database) throws -> Void)?
    public init(_ name: String, _ sql: String, code: (@Sendable (Database) throws -> Void)? = nil) {
        self.name = name; self.sql = sql; self.code = code
    }
}

public enum MigrationError: Error, CustomStringConvertible {
    /// The database was written by a newer version of vdrive: it knows migrations we do not.
    case newerSchema(path: String, unknown: [String])

    public var description: String {
        switch self {
        case .newerSchema(let path, let unknown):
            return "\(path) was written by a newer version of vdrive (unknown migrations: \(unknown.joined(separator: ", "))); upgrade vdrive, or point it at another state folder"
        }
    }
}

extension Database {
    /// Applies the migrations not yet recorded. Refuses a database that has migrations
    /// this build does not know, so an older binary never writes a newer schema.
    public func migrate(_ migrations: [Migration]) throws {
        try execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
        let applied = Set(try query("SELECT name FROM schema_migrations") { $0.string(0) ?? "" })
        let known = Set(migrations.map(\.name))
        let unknown = applied.subtracting(known)
        if !unknown.isEmpty { throw MigrationError.newerSchema(path: path, unknown: unknown.sorted()) }
        for migration in migrations where !applied.contains(migration.name) {
            try transaction {
                if !migration.sql.isEmpty { try execute(migration.sql) }
                try migration.code?(self)
                try run("INSERT INTO schema_migrations(name, applied_at) VALUES (?, strftime('%s','now'))", migration.name)
            }
        }
    }

    /// Throws `newerSchema` when the database records migrations this build does not
    /// know. Reads only, so a refused database is left exactly as it was.
    public func refuseNewerSchema(known migrations: [Migration]) throws {
        let hasTable = try queryOne("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") { _ in true } ?? false
        guard hasTable else { return }
        let applied = Set(try query("SELECT name FROM schema_migrations") { $0.string(0) ?? "" })
        let unknown = applied.subtracting(migrations.map(\.name))
        if !unknown.isEmpty { throw MigrationError.newerSchema(path: path, unknown: unknown.sorted()) }
    }

    public func appliedMigrations() throws -> [String] {
        try query("SELECT name FROM schema_migrations ORDER BY rowid") { $0.string(0) ?? "" }
    }
}
