import Postgres
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive serve check`, records part: can this server reach its database, which
/// version is it, which migrations are applied, may it create and write the tables.
/// Changes nothing (the write probe is rolled back; SQLite is opened read-only).
public enum RecordsCheck {
    public enum Problem: Sendable, Equatable {
        /// Nothing answers, or the server refuses connections now (EX_UNAVAILABLE).
        case unavailable
        /// The location is malformed, or the schema is from a newer vdrive (EX_CONFIG).
        case configuration
        /// The login, or creating / writing tables, was refused (EX_NOPERM).
        case permission
    }

    /// What was found, one fact a line, and the first problem if any.
    public struct Report: Sendable {
        public var lines: [String] = []
        public var problem: (kind: Problem, message: String)?
    }

    public static func run(_ location: DatabaseLocation) -> Report {
        switch location {
        case .sqlite(let path): return sqlite(path)
        case .postgres(let url): return postgres(url)
        }
    }

    static func schemaLines(applied: [String], into report: inout Report, location: String) {
        let known = Metadata.migrations(blobRoot: "/nonexistent").map(\.name)
        let unknown = applied.filter { !known.contains($0) }
        let pending = known.filter { !applied.contains($0) }
        report.lines.append("schema: \(applied.count) of \(known.count) migrations applied" + (applied.last.map { " (latest \($0))" } ?? ""))
        if !pending.isEmpty { report.lines.append("schema: to apply at the next start: " + pending.joined(separator: ", ")) }
        if !unknown.isEmpty {
            report.problem = (.configuration, MigrationError.newerSchema(path: location, unknown: unknown).description)
        }
    }

    private static func sqlite(_ path: String) -> Report {
        var report = Report()
        report.lines.append("records: SQLite \(path)")
        let folder = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        guard access(path, F_OK) == 0 else {
            report.lines.append("schema: no database yet (vdrive serve creates it)")
            if access(folder.isEmpty ? "." : folder, W_OK) != 0, access(folder.isEmpty ? "." : folder, F_OK) == 0 {
                report.problem = (.permission, "cannot create \(path): the folder \(folder) is not writable by this user")
            }
            return report
        }
        do {
            let db = try Database(path: path, options: .init(readOnly: true, create: false))
            let version = try db.queryOne("SELECT sqlite_version()") { $0.string(0) ?? "" } ?? "?"
            report.lines.append("version: SQLite \(version)")
            let hasTable = try db.queryOne("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") { _ in true } ?? false
            schemaLines(applied: hasTable ? try db.appliedMigrations() : [], into: &report, location: path)
        } catch {
            report.problem = (.configuration, "cannot read \(path): \(error)")
            return report
        }
        if access(path, W_OK) != 0 || access(folder.isEmpty ? "." : folder, W_OK) != 0 {
            report.problem = report.problem ?? (.permission, "\(path) or its folder is not writable by this user (SQLite writes a -wal file beside it)")
        } else {
            report.lines.append("permissions: can write the file and its folder")
        }
        return report
    }

    private static func postgres(_ url: String) -> Report {
        var report = Report()
        let shown = DatabaseLocation.redacted(url)
        report.lines.append("records: PostgreSQL \(shown)")
        switch PostgresProbe.ping(url) {
        case .badParameters(let reason):
            report.problem = (.configuration, "\(shown) is not a valid PostgreSQL URL: \(reason)")
            return report
        case .noResponse:
            report.problem = (.unavailable, "no PostgreSQL server answers at \(shown); start it, or check the host, port or socket folder")
            return report
        case .rejecting:
            report.problem = (.unavailable, "the PostgreSQL server at \(shown) refuses connections now (starting up or shutting down); try again")
            return report
        case .accepting:
            break
        }
        let connection: PostgresConnection
        do { connection = try PostgresConnection(url) } catch {
            report.problem = (.permission, "the PostgreSQL server at \(shown) refused the login: \(error.message)")
            return report
        }
        do {
            let who = try connection.execute("SELECT current_user, current_database(), current_setting('server_version')")
            report.lines.append("version: PostgreSQL \(who.text(0, 2) ?? "?") (user \(who.text(0, 0) ?? "?"), database \(who.text(0, 1) ?? "?"))")
            let exists = try connection.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").text(0, 0) == "t"
            var applied: [String] = []
            if exists {
                let rows = try connection.execute("SELECT name FROM schema_migrations ORDER BY name")
                applied = (0..<rows.rowCount).map { rows.text($0, 0) ?? "" }
            }
            schemaLines(applied: applied, into: &report, location: shown)
        } catch {
            report.problem = (error.isPermissionDenied ? .permission : .unavailable, "reading the schema failed: \(error.message)")
            return report
        }
        // Create and write, then roll back: the migrations need the first, every request the second.
        do {
            try connection.execute("BEGIN")
            defer { _ = try? connection.execute("ROLLBACK") }
            try connection.execute("CREATE TABLE vdrive_check_probe (x BIGINT PRIMARY KEY)")
            try connection.execute("INSERT INTO vdrive_check_probe VALUES ($1)", [.text("1")])
            let tables = try connection.execute("""
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname <> 'vdrive_check_probe'
                  AND NOT has_table_privilege(c.oid, 'SELECT,INSERT,UPDATE,DELETE') ORDER BY 1
                """)
            if tables.rowCount > 0 {
                let names = (0..<tables.rowCount).map { tables.text($0, 0) ?? "" }
                report.problem = (.permission, "this user may not read and write the tables \(names.joined(separator: ", ")); GRANT SELECT, INSERT, UPDATE, DELETE on them")
                return report
            }
            report.lines.append("permissions: can create tables and write them")
        } catch {
            report.problem = (error.isPermissionDenied ? .permission : .unavailable,
                              "this user may not create tables in the current schema: \(error.message); GRANT CREATE ON SCHEMA public (or make the user the database's owner)")
        }
        return report
    }
}
