import Crypto
import Protocol
import Storage
import Synchronization

/// The server's SQLite database: devices, blocks, contents, uploads, files, settings.
/// One connection (WAL, synchronous=NORMAL: a commit survives a kill of the process,
/// and a power loss keeps a consistent prefix), used under a mutex by every
/// connection thread. Calls are short (no I/O on block files under the lock; the one
/// exception is the migration to blocks, run once when the database is opened).
final class Metadata: Sendable {
    private let db: Mutex<Database>
    let path: String

    /// The schema, in order. `blobRoot` is the block store the code of
    /// `server-002-blocks` splits old blobs into (BlockMigration.swift).
    static func migrations(blobRoot: String) -> [Migration] { [
        Migration("server-001-initial", """
        CREATE TABLE settings (key TEXT PRIMARY KEY, value BLOB NOT NULL);
        CREATE TABLE devices (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            token_hash TEXT UNIQUE,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER,
            watermark_sequence INTEGER,
            watermark_capture_date INTEGER,
            watermark_updated_at INTEGER
        );
        CREATE TABLE blobs (hash TEXT PRIMARY KEY, size INTEGER NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE uploads (
            id TEXT PRIMARY KEY,
            hash TEXT NOT NULL UNIQUE,
            length INTEGER NOT NULL,
            received INTEGER NOT NULL DEFAULT 0,
            expires_at INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            device_id INTEGER,
            completed_at INTEGER
        );
        CREATE TABLE files (
            path TEXT PRIMARY KEY,
            hash TEXT NOT NULL,
            size INTEGER NOT NULL,
            capture_date INTEGER,
            mtime INTEGER NOT NULL,
            device_id INTEGER NOT NULL,
            device_sequence INTEGER NOT NULL,
            sequence INTEGER NOT NULL UNIQUE
        );
        """),
        BlockMigration.migration(blobRoot: blobRoot),
        FileVersions.migration,
        BlockChunks.migration,
        FileVersions.deletionsMigration,
    ] }

    init(path: String, blobRoot: String) throws(ServerError) {
        self.path = path
        do {
            let database = try Database(path: path)
            // mmap: lookups (dedup checks) read pages without a syscall each; at most 64 MiB is mapped.
            try database.execute("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA mmap_size=67108864")
            try database.migrate(Self.migrations(blobRoot: blobRoot))
            db = Mutex(database)
        } catch let e as MigrationError {
            throw .newerSchema(e.description)
        } catch {
            throw .database(path, "\(error)")
        }
    }

    @discardableResult
    func withDatabase<T: Sendable>(_ body: (Database) throws -> T) throws -> T {
        try db.withLock { database throws -> T in try body(database) }
    }

    // MARK: settings

    /// The presigning key: 32 random bytes made on first use and kept in the database.
    func presignKey() throws -> [UInt8] {
        try withDatabase { db in
            if let key = try db.queryOne("SELECT value FROM settings WHERE key = 'presign_key'", row: { $0.bytes(0) }), let key, key.count >= 32 {
                return key
            }
            let key = SecureRandom.bytes(32)
            try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES ('presign_key', ?)", key)
            return key
        }
    }

    // MARK: devices

    struct Device: Sendable, Equatable {
        let id: Int64
        let name: String
        let createdAt: Int64
        let revokedAt: Int64?
    }

    static func tokenHash(_ token: String) -> String { SHA256Hasher.digest(token).hex }

    /// The active device holding this token, or nil.
    func device(token: String) throws -> Device? {
        let hash = Self.tokenHash(token)
        return try withDatabase { db in
            try db.queryOne("SELECT id, name, created_at, revoked_at FROM devices WHERE token_hash = ? AND revoked_at IS NULL", hash) {
                Device(id: $0.int64(0), name: $0.string(1) ?? "", createdAt: $0.int64(2), revokedAt: $0.isNull(3) ? nil : $0.int64(3))
            }
        }
    }

    // MARK: blocks and contents

    /// The length of a stored block, nil when the workspace lacks it.
    func blockSize(_ hash: String) throws -> Int64? {
        try withDatabase { db in try db.queryOne("SELECT size FROM blocks WHERE hash = ?", hash) { $0.int64(0) } }
    }

    /// The subset of the content hashes `hashes` (validated lowercase hex) that has a
    /// manifest: one query, the list passed as one JSON array (`json_each`), so 10,000
    /// hashes cost one statement. Sorted first, the lookups walk the primary-key B-tree
    /// in order (fewer page misses).
    func presentContents(_ hashes: [String]) throws -> [String] {
        let list = "[\"" + hashes.sorted().joined(separator: "\",\"") + "\"]"
        return try withDatabase { db in
            try db.query("SELECT c.hash FROM json_each(?) j JOIN contents c ON c.hash = j.value", hashes.isEmpty ? "[]" : list) { $0.string(0) ?? "" }
        }
    }

    /// The stored length of each of `hashes` that is a stored block (one statement).
    func blockSizes(_ hashes: [String]) throws -> [String: Int64] {
        if hashes.isEmpty { return [:] }
        let list = "[\"" + hashes.joined(separator: "\",\"") + "\"]"
        let rows = try withDatabase { db in
            try db.query("SELECT t.hash, t.size FROM json_each(?) j JOIN blocks t ON t.hash = j.value", list) { ($0.string(0) ?? "", $0.int64(1)) }
        }
        return Dictionary(rows, uniquingKeysWith: { a, _ in a })
    }

    /// A stored manifest, nil when the workspace has no such content.
    func manifest(_ content: SHA256Digest) throws -> BlockManifest? {
        let row = try withDatabase { db in
            try db.queryOne("SELECT size, blocks FROM contents WHERE hash = ?", content.hex) { ($0.int64(0), $0.string(1) ?? "[]") }
        }
        guard let (size, list) = row else { return nil }
        guard let blocks = Self.decodeBlockList(list) else {
            throw DatabaseError(code: 0, message: "the block list of content \(content.hex) is damaged", sql: nil)
        }
        return BlockManifest(content: content, size: size, blocks: blocks)
    }

    /// Block lists are stored as a JSON array of hex digests, so SQL can walk them
    /// (`json_each`) and they read back as text in the sqlite3 shell.
    static func encodeBlockList(_ blocks: [SHA256Digest]) -> String {
        "[" + blocks.map { "\"" + $0.hex + "\"" }.joined(separator: ",") + "]"
    }

    static func decodeBlockList(_ text: String) -> [SHA256Digest]? {
        guard let strings = try? WireJSON.decode([String].self, from: Array(text.utf8)) else { return nil }
        var out: [SHA256Digest] = []
        out.reserveCapacity(strings.count)
        for s in strings {
            guard let d = SHA256Digest(hex: s) else { return nil }
            out.append(d)
        }
        return out
    }
}
