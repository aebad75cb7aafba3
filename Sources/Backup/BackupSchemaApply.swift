import Storage

extension BackupSchema {
    /// Applies the backup migrations not yet recorded, without judging the others.
    /// `Database.migrate` refuses a database holding migrations it was not given, which is
    /// right for the catalog's owner (the drive passes its list + `BackupSchema.migrations`)
    /// but wrong for us, a guest in the drive's database: the drive's own migrations are
    /// not ours to know.
    public static func apply(to db: Database) throws {
        try db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
        let applied = Set(try db.query("SELECT name FROM schema_migrations WHERE name LIKE 'backup-%'") { $0.string(0) ?? "" })
        for migration in migrations where !applied.contains(migration.name) {
            try db.transaction {
                if !migration.sql.isEmpty { try db.execute(migration.sql) }
                try migration.code?(db)
                try db.run("INSERT INTO schema_migrations(name, applied_at) VALUES (?, strftime('%s','now'))", migration.name)
            }
        }
    }
}
