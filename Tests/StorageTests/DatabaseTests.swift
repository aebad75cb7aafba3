import Testing
import TestTraits
import Foundation
import TestSupport
@testable import Storage

@Suite(.tags(.logic)) struct DatabaseTests {
    let migrations = [
        Migration("001-items", "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)"),
        Migration("002-size", "ALTER TABLE items ADD COLUMN size INTEGER NOT NULL DEFAULT 0"),
    ]

    @Test func migrationsApplyOnceAndInOrder() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        do {
            let db = try Database(path: dir.path + "/a.sqlite")
            try db.migrate(migrations)
            try db.run("INSERT INTO items(name, size) VALUES (?, ?)", "x", 3)
        }
        let db = try Database(path: dir.path + "/a.sqlite")
        try db.migrate(migrations)   // second run is a no-op
        #expect(try db.appliedMigrations() == ["001-items", "002-size"])
        #expect(try db.queryOne("SELECT size FROM items WHERE name = ?", "x") { $0.int(0) } == 3)
    }

    @Test func refusesSchemaFromNewerVersion() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let db = try Database(path: dir.path + "/a.sqlite")
        try db.migrate(migrations + [Migration("003-future", "CREATE TABLE future (x)")])
        #expect(throws: MigrationError.self) { try db.migrate(migrations) }
    }

    @Test func failedTransactionRollsBackEverything() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let db = try Database(path: dir.path + "/a.sqlite")
        try db.migrate(migrations)
        #expect(throws: DatabaseError.self) {
            try db.transaction {
                try db.run("INSERT INTO items(name) VALUES ('a')")
                try db.run("INSERT INTO items(name) VALUES ('a')")   // UNIQUE violation
            }
        }
        #expect(try db.queryOne("SELECT count(*) FROM items") { $0.int(0) } == 0)
    }

    @Test func errorsCarryTheSQL() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let db = try Database(path: dir.path + "/a.sqlite")
        do {
            try db.run("SELECT * FROM missing_table")
            Issue.record("expected an error")
        } catch let error as DatabaseError {
            #expect(error.sql == "SELECT * FROM missing_table")
            #expect(error.message.contains("missing_table"))
        }
    }

    @Test func notADatabaseIsReportedAsCorrupt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let path = dir.path + "/bad.sqlite"
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: path))
        do {
            let db = try Database(path: path)
            try db.migrate(migrations)
            Issue.record("expected an error")
        } catch let error as DatabaseError {
            #expect(error.isCorrupt)
        }
    }
}
