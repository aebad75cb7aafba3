/// Storage: the SQLite wrapper, the content-addressed blob store and file I/O helpers
/// shared by the drive and the server.
///
/// Terms: a `Database` is one SQLite connection; a `Statement` a prepared statement
/// on it; a `Migration` a named schema change recorded in `schema_migrations`.
/// Thread safety: a `Database` is used by one thread at a time; its owner
/// serialises access (the drive's catalog holds it under a mutex, the server
/// keeps one per thread role). Imports: CSQLite, Crypto, Glibc.
import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// A failed SQLite call: the result code, SQLite's message and the SQL at fault.
public struct DatabaseError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    public let sql: String?

    public init(code: Int32, message: String, sql: String?) {
        self.code = code
        self.message = message
        self.sql = sql
    }

    public var description: String {
        if let sql { return "SQLite error \(code): \(message) (in: \(sql))" }
        return "SQLite error \(code): \(message)"
    }

    /// The primary result code (extended codes carry detail in the upper bits).
    public var primaryCode: Int32 { code & 0xff }
    public var isDiskFull: Bool { primaryCode == SQLITE_FULL }
    public var isCorrupt: Bool { primaryCode == SQLITE_CORRUPT || primaryCode == SQLITE_NOTADB }
    public var isConstraint: Bool { primaryCode == SQLITE_CONSTRAINT }
    public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
}

/// A value bound to or read from a statement.
public enum SQLValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

public protocol SQLBindable { var sqlValue: SQLValue { get } }
extension Int: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqlValue: SQLValue { .integer(self) } }
extension UInt64: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(bitPattern: self)) } }
extension UInt32: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Int32: SQLBindable { public var sqlValue: SQLValue { .integer(Int64(self)) } }
extension Bool: SQLBindable { public var sqlValue: SQLValue { .integer(self ? 1 : 0) } }
extension Double: SQLBindable { public var sqlValue: SQLValue { .real(self) } }
extension String: SQLBindable { public var sqlValue: SQLValue { .text(self) } }
extension Array: SQLBindable where Element == UInt8 { public var sqlValue: SQLValue { .blob(self) } }
extension SQLValue: SQLBindable { public var sqlValue: SQLValue { self } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// The handlers of `Database.observeChanges`, kept alive by the connection.
private final class ChangeHooks {
    let rowChanged: (String, Int64) -> Void
    let rolledBack: () -> Void
    let changeEnded: () -> Void
    init(rowChanged: @escaping (String, Int64) -> Void, rolledBack: @escaping () -> Void, changeEnded: @escaping () -> Void) {
        self.rowChanged = rowChanged
        self.rolledBack = rolledBack
        self.changeEnded = changeEnded
    }
}

/// One SQLite connection.
/// `@unchecked Sendable`: the raw handle is not thread-safe; every owner keeps a
/// connection on one thread at a time (a mutex or a serial role), as stated above.
public final class Database: @unchecked Sendable {
    let handle: OpaquePointer
    public let path: String
    private var statementCache: [String: Statement] = [:]
    private var changeHooks: ChangeHooks?

    public struct OpenOptions: Sendable {
        public var readOnly = false
        public var create = true
        public init(readOnly: Bool = false, create: Bool = true) { self.readOnly = readOnly; self.create = create }
    }

    public init(path: String, options: OpenOptions = OpenOptions()) throws {
        var db: OpaquePointer?
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        flags |= options.readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if options.create && !options.readOnly { flags |= SQLITE_OPEN_CREATE }
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            if let db { sqlite3_close_v2(db) }
            throw DatabaseError(code: rc, message: message, sql: nil)
        }
        handle = db
        self.path = path
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        statementCache.removeAll()
        if changeHooks != nil {
            sqlite3_update_hook(handle, nil, nil)
            sqlite3_rollback_hook(handle, nil, nil)
        }
        sqlite3_close_v2(handle)
    }

    /// Runs one or more statements that return no rows.
    public func execute(_ sql: String) throws {
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errmsg)
            throw DatabaseError(code: sqlite3_extended_errcode(handle), message: message, sql: sql)
        }
    }

    /// A prepared statement, cached by its SQL text and reset before reuse.
    public func prepare(_ sql: String) throws -> Statement {
        if let cached = statementCache[sql] {
            cached.reset()
            return cached
        }
        let statement = try Statement(database: self, sql: sql)
        statementCache[sql] = statement
        return statement
    }

    /// Executes a statement with arguments; returns the number of rows changed.
    @discardableResult
    public func run(_ sql: String, _ arguments: SQLBindable...) throws -> Int {
        try run(sql, arguments: arguments)
    }

    @discardableResult
    public func run(_ sql: String, arguments: [SQLBindable]) throws -> Int {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        try statement.stepToEnd()
        return Int(sqlite3_changes(handle))
    }

    /// All rows of a query, each mapped by `row`.
    public func query<T>(_ sql: String, _ arguments: SQLBindable..., row: (Row) throws -> T) throws -> [T] {
        try query(sql, arguments: arguments, row: row)
    }

    public func query<T>(_ sql: String, arguments: [SQLBindable], row: (Row) throws -> T) throws -> [T] {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        var out: [T] = []
        while try statement.step() { out.append(try row(Row(statement: statement))) }
        return out
    }

    /// The first row of a query, or nil.
    public func queryOne<T>(_ sql: String, _ arguments: SQLBindable..., row: (Row) throws -> T) throws -> T? {
        let statement = try prepare(sql)
        try statement.bind(arguments)
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        return try row(Row(statement: statement))
    }

    /// Calls `rowChanged(table, rowid)` for every row this connection inserts, updates or
    /// deletes in a rowid table (not in WITHOUT ROWID tables), and `rolledBack()` when a
    /// transaction is rolled back: what a cache of rows needs to stay exact. The handlers
    /// run inside SQLite's statement execution: they must not use the connection.
    /// `changeEnded()` after each `transaction` that succeeded: committed, or released into
    /// the open group (`groupStarted` tells which).
    public func observeChanges(rowChanged: @escaping (_ table: String, _ rowid: Int64) -> Void,
                               rolledBack: @escaping () -> Void, changeEnded: @escaping () -> Void = {}) {
        let hooks = ChangeHooks(rowChanged: rowChanged, rolledBack: rolledBack, changeEnded: changeEnded)
        changeHooks = hooks
        let context = Unmanaged.passUnretained(hooks).toOpaque()
        sqlite3_update_hook(handle, { context, _, _, table, rowid in
            guard let context, let table else { return }
            Unmanaged<ChangeHooks>.fromOpaque(context).takeUnretainedValue().rowChanged(String(cString: table), rowid)
        }, context)
        sqlite3_rollback_hook(handle, { context in
            guard let context else { return }
            Unmanaged<ChangeHooks>.fromOpaque(context).takeUnretainedValue().rolledBack()
        }, context)
    }

    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }
    public var changes: Int { Int(sqlite3_changes(handle)) }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// While `groupsCommits` is on, the body runs in a savepoint of one longer
    /// transaction instead, which `commitGroup()` commits.
    public func transaction<T>(immediate: Bool = true, _ body: () throws -> T) throws -> T {
        if groupsCommits { return try inGroup(body) }
        try execute(immediate ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let result = try body()
            try execute("COMMIT")
            commitCount += 1
            changeHooks?.changeEnded()
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    // MARK: Group commit

    /// When on, each `transaction` is a savepoint of one longer transaction, opened by the
    /// first of them and committed by `commitGroup()`: many small changes share one WAL
    /// commit. Statements run outside `transaction` join the open group too.
    public var groupsCommits = false
    /// Transactions and groups committed on this connection (a sign that commits work).
    public private(set) var commitCount = 0
    /// When the open group began (CLOCK_MONOTONIC nanoseconds), or nil.
    public private(set) var groupStarted: UInt64?

    private func inGroup<T>(_ body: () throws -> T) throws -> T {
        if groupStarted == nil {
            try execute("BEGIN IMMEDIATE")
            groupStarted = Self.monotonicNanoseconds()
        }
        try run("SAVEPOINT change")
        do {
            let result = try body()
            try run("RELEASE change")
            changeHooks?.changeEnded()
            return result
        } catch {
            // The rollback hook runs only for a whole transaction: caches hear of this one here.
            changeHooks?.rolledBack()
            if sqlite3_get_autocommit(handle) != 0 {
                // SQLite rolled the whole group back (disk full, I/O error): it is gone.
                groupStarted = nil
                throw GroupLost(underlying: error)
            }
            _ = try? run("ROLLBACK TO change")
            _ = try? run("RELEASE change")
            throw error
        }
    }

    /// Commits the open group, if any. On failure the group stays open when SQLite kept
    /// it (a retry may succeed) and is gone when SQLite rolled it back; `groupLost`
    /// says which.
    public func commitGroup() throws {
        guard groupStarted != nil else { return }
        do {
            try execute("COMMIT")
            groupStarted = nil
            commitCount += 1
        } catch {
            if sqlite3_get_autocommit(handle) != 0 {
                groupStarted = nil
                changeHooks?.rolledBack()
                throw GroupLost(underlying: error)
            }
            throw error
        }
    }

    /// A group commit failed and SQLite rolled the group back: its changes are gone.
    public struct GroupLost: Error, CustomStringConvertible {
        public let underlying: Error
        public var description: String { "the catalog's last changes could not be committed and were rolled back: \(underlying)" }
    }

    public static func monotonicNanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    func error(sql: String?) -> DatabaseError {
        DatabaseError(code: sqlite3_extended_errcode(handle), message: String(cString: sqlite3_errmsg(handle)), sql: sql)
    }
}

/// A prepared statement. Belongs to its `Database` and to that database's thread rule.
public final class Statement {
    let handle: OpaquePointer
    unowned let database: Database
    let sql: String

    init(database: Database, sql: String) throws {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(database.handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw database.error(sql: sql) }
        handle = stmt
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(handle) }

    func reset() {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
    }

    func bind(_ values: [SQLBindable]) throws {
        for (index, value) in values.enumerated() {
            let i = Int32(index + 1)
            let rc: Int32
            switch value.sqlValue {
            case .null: rc = sqlite3_bind_null(handle, i)
            case .integer(let v): rc = sqlite3_bind_int64(handle, i, v)
            case .real(let v): rc = sqlite3_bind_double(handle, i, v)
            case .text(let s): rc = vd_sqlite3_bind_text_transient(handle, i, s, -1)
            case .blob(let b):
                rc = b.withUnsafeBytes { vd_sqlite3_bind_blob_transient(handle, i, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(b.count)) }
            }
            if rc != SQLITE_OK { throw database.error(sql: sql) }
        }
    }

    /// Advances one row; false at the end.
    func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let err = database.error(sql: sql)
        sqlite3_reset(handle)
        throw err
    }

    func stepToEnd() throws {
        defer { sqlite3_reset(handle) }
        while try step() {}
    }
}

/// The current row of a statement; valid only inside the mapping closure.
public struct Row {
    let statement: Statement

    public func isNull(_ i: Int32) -> Bool { sqlite3_column_type(statement.handle, i) == SQLITE_NULL }
    public func int64(_ i: Int32) -> Int64 { sqlite3_column_int64(statement.handle, i) }
    public func int(_ i: Int32) -> Int { Int(sqlite3_column_int64(statement.handle, i)) }
    public func double(_ i: Int32) -> Double { sqlite3_column_double(statement.handle, i) }
    public func string(_ i: Int32) -> String? {
        guard let p = sqlite3_column_text(statement.handle, i) else { return nil }
        let n = Int(sqlite3_column_bytes(statement.handle, i))
        return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
    }
    public func bytes(_ i: Int32) -> [UInt8]? {
        if isNull(i) { return nil }
        let n = Int(sqlite3_column_bytes(statement.handle, i))
        guard n > 0, let p = sqlite3_column_blob(statement.handle, i) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}
