import Crypto
import Protocol
import Storage

/// The server's records: devices, blocks, contents, uploads, file versions, settings, the workspace tree,
/// in SQLite (the embedded default, `SQLiteRecords`) or PostgreSQL (`PostgresRecords`),
/// behind `RecordStore`. Every piece of the server's SQL is a record operation here or
/// in the files that extend it (UploadRecords.swift, FileVersions.swift,
/// Manifests.swift, Devices.swift, BackupAdmin.swift, BlockMigration.swift, TreeNodes.swift,
/// TreePages.swift, TreeTrash.swift); handlers
/// call operations, never SQL.
final class Metadata: Sendable {
    let store: any RecordStore

    /// The schema, in order: each migration with its SQLite and its PostgreSQL body.
    /// `blobRoot` is the block store the code of `server-002-blocks` splits old blobs
    /// into (BlockMigration.swift; SQLite only: a PostgreSQL database is newer than blocks).
    /// A new migration adds both bodies: `RecordMigration(sqlite: Migration(...), postgres: "...")`.
    static func migrations(blobRoot: String) -> [RecordMigration] { [
        RecordMigration(sqlite: Migration("server-001-initial", """
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
        """), postgres: PostgresSchema.initial),
        RecordMigration(sqlite: BlockMigration.migration(blobRoot: blobRoot), postgres: PostgresSchema.blocks),
        RecordMigration(sqlite: FileVersions.migration, postgres: PostgresSchema.versions),
        RecordMigration(sqlite: BlockChunks.migration, postgres: PostgresSchema.blockChunks),
        RecordMigration(sqlite: FileVersions.deletionsMigration, postgres: PostgresSchema.deletions),
        RecordMigration(sqlite: BlockNames.migration, postgres: BlockNames.postgres),
        RecordMigration(sqlite: TreeSchema.sqlite, postgres: TreeSchema.postgres),
    ] }

    /// Opens (and migrates) the records at `location`.
    init(location: DatabaseLocation, blobRoot: String) throws(ServerError) {
        do {
            store = try Self.open(location)
            try store.migrate(Self.migrations(blobRoot: blobRoot))
        } catch {
            throw ServerError.records(location, error)
        }
    }

    /// The store at `location`, not migrated (`vdrive serve check` reads it as it is).
    static func open(_ location: DatabaseLocation) throws -> any RecordStore {
        switch location {
        case .sqlite(let path): return try SQLiteRecords(path: path)
        case .postgres(let url): return try PostgresRecords(connectionString: url)
        }
    }

    /// Runs `body` on a session (see `RecordStore.withSession`: it must be safe to repeat).
    @discardableResult
    func withSession<T>(_ body: (any RecordSession) throws -> T) throws -> T {
        try store.withSession(body)
    }

    // MARK: settings

    /// The presigning key: 32 random bytes made on first use and kept in the database.
    func presignKey() throws -> [UInt8] { try randomSetting("presign_key", bytes: 32) }

    /// The workspace's identity: 16 random bytes made on first use and kept with the
    /// records, as 32 hex digits. Every server process on the same records says the same;
    /// a reset server (new records) says another, and so does another workspace at the
    /// same address. The change feed carries it so a drive can tell (RecordsFollower).
    func workspaceID() throws -> String { Hex.encode(try randomSetting("workspace_id", bytes: 16)) }

    /// A setting of `bytes` random bytes, made on first use. Two processes starting at
    /// once on a fresh database make one value between them: the second's insert does
    /// nothing and it reads the first's.
    private func randomSetting(_ key: String, bytes: Int) throws -> [UInt8] {
        try withSession { db in
            try db.transaction {
                if let value = try db.queryOne("SELECT value FROM settings WHERE key = ?", key, row: { $0.bytes(0) }), let value, value.count >= bytes {
                    return value
                }
                try db.run("""
                    INSERT INTO settings(key, value) VALUES (?, ?)
                    ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE length(settings.value) < \(bytes)
                    """, key, SecureRandom.bytes(bytes))
                return try db.queryOne("SELECT value FROM settings WHERE key = ?", key, row: { $0.bytes(0) }).flatMap { $0 } ?? []
            }
        }
    }

    // MARK: devices

    struct Device: Sendable, Equatable {
        let id: Int64
        let name: String
        let createdAt: Int64
        let revokedAt: Int64?
        /// The first 16 hex digits of the token's hash: presigned URLs carry it, so a URL
        /// handed out under a token stops when the token is revoked or re-issued.
        var tokenFingerprint: String = ""
    }

    static func tokenHash(_ token: String) -> String { SHA256Hasher.digest(token).hex }

    /// The device holding this token, or nil when no device does. A revoked device keeps
    /// its token's hash until a new token is issued, so the caller can say "revoked"
    /// rather than "unknown" (`revokedAt` is set).
    func device(token: String) throws -> Device? {
        let hash = Self.tokenHash(token)
        return try withSession { db in
            try db.queryOne("SELECT id, name, created_at, revoked_at FROM devices WHERE token_hash = ?", hash) {
                Device(id: $0.int64(0), name: $0.string(1) ?? "", createdAt: $0.int64(2), revokedAt: $0.optionalInt64(3),
                       tokenFingerprint: String(hash.prefix(16)))
            }
        }
    }

    /// The device's watermark, nil when it never set one.
    func watermark(deviceID: Int64) throws -> Watermark? {
        try withSession { db in
            try db.queryOne("SELECT watermark_sequence, watermark_capture_date FROM devices WHERE id = ? AND watermark_sequence IS NOT NULL", deviceID) {
                Watermark(sequence: $0.int64(0), newestCaptureDate: $0.optionalInt64(1))
            }
        }
    }

    func setWatermark(_ mark: Watermark, deviceID: Int64, now: Int64) throws {
        try withSession { db in
            try db.run("UPDATE devices SET watermark_sequence = ?, watermark_capture_date = ?, watermark_updated_at = ? WHERE id = ?",
                       mark.sequence, mark.newestCaptureDate, now, deviceID)
        }
    }

    // MARK: blocks and contents

    /// The length of a stored block, nil when the workspace lacks it.
    func blockSize(_ hash: String) throws -> Int64? {
        try withSession { db in try db.queryOne("SELECT size FROM blocks WHERE hash = ?", hash) { $0.int64(0) } }
    }

    /// The subset of the content hashes `hashes` (validated lowercase hex) that has a
    /// manifest: one query, the list passed as one parameter (`hashTable`), so 10,000
    /// hashes cost one statement. Sorted first, the lookups walk the primary-key B-tree
    /// in order (fewer page misses).
    func presentContents(_ hashes: [String]) throws -> [String] {
        try withSession { db in
            let list = db.hashTable(hashes.sorted())
            return try db.query("SELECT c.hash FROM \(list.sql) JOIN contents c ON c.hash = j.value", list.argument) { $0.string(0) ?? "" }
        }
    }

    /// The stored length of each of `hashes` that is a stored block (one statement).
    func blockSizes(_ hashes: [String]) throws -> [String: Int64] {
        if hashes.isEmpty { return [:] }
        let rows = try withSession { db in
            let list = db.hashTable(hashes)
            return try db.query("SELECT t.hash, t.size FROM \(list.sql) JOIN blocks t ON t.hash = j.value", list.argument) { ($0.string(0) ?? "", $0.int64(1)) }
        }
        return Dictionary(rows, uniquingKeysWith: { a, _ in a })
    }

    /// Records a block that is in the store (and marks its upload complete) in one
    /// transaction. Recording a block twice (two processes, two uploads) keeps one row.
    /// `present` says whether the block's bytes are in the store; asked inside the
    /// transaction, after the collection's marker was looked for (`BlockNames.mayRecord`):
    /// throws `BlockBeingRemoved` when the collection is taking or took the bytes.
    func recordBlock(_ hash: String, size: Int64, uploadID: String?, now: Int64, present: () throws -> Bool) throws {
        try withSession { db in
            try db.transaction {
                guard try BlockNames.mayRecord(hash, in: db, present: present) else { throw BlockBeingRemoved(hash: hash) }
                try db.run("INSERT INTO blocks(hash, size, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING", hash, size, now)
                if let uploadID {
                    try db.run("UPDATE uploads SET received = length, completed_at = ? WHERE id = ?", now, uploadID)
                }
            }
        }
    }

    /// A block's kept chunk digests (32 bytes each, in order), nil when none are kept.
    func blockChunks(_ hash: String) throws -> [UInt8]? {
        try withSession { db in try db.queryOne("SELECT digests FROM block_chunks WHERE hash = ?", hash) { $0.bytes(0) ?? [] } }
    }

    func setBlockChunks(_ hash: String, _ digests: [UInt8]) throws {
        try withSession { db in
            try db.run("INSERT INTO block_chunks(hash, digests) VALUES (?, ?) ON CONFLICT(hash) DO UPDATE SET digests = excluded.digests", hash, digests)
        }
    }

    /// A stored manifest, nil when the workspace has no such content.
    func manifest(_ content: SHA256Digest) throws -> BlockManifest? {
        let row = try withSession { db in
            try db.queryOne("SELECT size, blocks FROM contents WHERE hash = ?", content.hex) { ($0.int64(0), $0.string(1) ?? "[]") }
        }
        guard let (size, list) = row else { return nil }
        // Checked against the size too: readers index the list by positions within the
        // size, and a short list (a damaged row) would trap there rather than fail.
        guard let blocks = Self.decodeBlockList(list), size >= 0, blocks.count == Blocks.count(forSize: size) else {
            throw DatabaseError(code: 0, message: "the block list of content \(content.hex) is damaged", sql: nil)
        }
        return BlockManifest(content: content, size: size, blocks: blocks)
    }

    /// Block lists are stored as a JSON array of hex digests, so SQL can walk them
    /// (`json_each`, `jsonb_array_elements_text`) and they read back as text in a shell.
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
