import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The embedded records: one SQLite file in the data folder (WAL, synchronous=NORMAL:
/// a commit survives a kill of the process, and a power loss keeps a consistent
/// prefix), one connection used under a mutex by every connection thread. Calls are
/// short (no I/O on block files under the lock; the one exception is the migration to
/// blocks, run once when the database is opened). Other processes (`vdrive serve
/// device add` while the server runs) open the same file: WAL lets them.
final class SQLiteRecords: RecordStore {
    private let db: Mutex<Database>
    let path: String
    var dialect: SQLDialect { .sqlite }
    var location: String { path }

    init(path: String) throws {
        self.path = path
        // Made 0600 before SQLite creates it under the process's umask; its -wal and -shm take the database's mode.
        if let fd = try? FileIO.open(path, O_WRONLY | O_CREAT, 0o600) { FileIO.close(fd) }
        let database = try Database(path: path)
        // mmap: lookups (dedup checks) read pages without a syscall each; at most 64 MiB is mapped.
        // Inside a transaction SQLite keeps what it would restore should one statement fail
        // halfway (a statement journal) in a temporary file by default: 140 MB written to
        // /var/tmp while a device sent 10,000 new files. In memory here.
        // The cache (32 MB, SQLite's default 2 MB) holds pages written since the last
        // checkpoint, which mmap does not cover: they are in the WAL, read with a syscall each.
        try database.execute("""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA mmap_size=67108864;
            PRAGMA temp_store=MEMORY; PRAGMA cache_size=-32000
            """)
        db = Mutex(database)
    }

    func withSession<T>(_ body: (any RecordSession) throws -> T) throws -> T {
        try db.withLock { database throws -> T in try body(SQLiteSession(database: database)) }
    }

    func migrate(_ migrations: [RecordMigration]) throws {
        try db.withLock { database throws in try database.migrate(migrations.map(\.sqlite)) }
    }

    func appliedMigrations() throws -> [String] {
        try db.withLock { database throws in
            let exists = try database.queryOne("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'") { _ in true } ?? false
            return exists ? try database.appliedMigrations() : []
        }
    }
}

/// The SQLite connection as a record session (the caller holds the mutex).
struct SQLiteSession: RecordSession {
    let database: Database
    var dialect: SQLDialect { .sqlite }

    func run(_ sql: String, arguments: [SQLBindable]) throws -> Int { try database.run(sql, arguments: arguments) }

    func query<T>(_ sql: String, arguments: [SQLBindable], row: (any RecordRow) throws -> T) throws -> [T] {
        try database.query(sql, arguments: arguments) { try row($0) }
    }

    func transaction<T>(_ body: () throws -> T) throws -> T { try database.transaction(body) }
}
