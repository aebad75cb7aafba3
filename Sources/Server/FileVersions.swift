import Crypto
import Protocol
import Storage

/// File records keyed by (device, path), with every version kept.
///
/// - `file_versions`: one row per version. Its `sequence` (INTEGER PRIMARY KEY
///   AUTOINCREMENT) is the version's position in the change feed; AUTOINCREMENT so a
///   sequence is never handed out twice, even after the newest version was deleted
///   by an admin (a feed reader past it would otherwise miss the next one).
/// - `files`: the current version of each (device, path), by its sequence.
///
/// A *version* is a content: recording another hash for a (device, path) adds a
/// version and keeps the older ones. Recording the current hash again with other
/// metadata (mtime, capture date, device sequence) replaces that version's metadata
/// and moves it to the end of the feed (a new sequence), since its bytes are the same.
/// Nothing a device sends deletes a version; only `BackupAdmin` does.
/// Every function here runs inside the caller's `Metadata.withDatabase`.
enum FileVersions {
    /// `server-003-versions`: moves `files` (one record per path: the last device to
    /// record a path replaced the record of any other) to per-device records. Every
    /// record still there becomes the current and only version of (its device, its
    /// path) with its sequence unchanged, so change-feed cursors stay valid. Records
    /// replaced before this migration are gone from the old table; their contents stay
    /// stored and downloadable by hash.
    static let migration = Migration("server-003-versions", """
    CREATE TABLE file_versions (
        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
        device_id INTEGER NOT NULL,
        path TEXT NOT NULL,
        hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        capture_date INTEGER,
        mtime INTEGER NOT NULL,
        device_sequence INTEGER NOT NULL,
        recorded_at INTEGER
    );
    CREATE INDEX file_versions_by_key ON file_versions(device_id, path, sequence);
    INSERT INTO file_versions(sequence, device_id, path, hash, size, capture_date, mtime, device_sequence, recorded_at)
        SELECT sequence, device_id, path, hash, size, capture_date, mtime, device_sequence, NULL FROM files ORDER BY sequence;
    DROP TABLE files;
    CREATE TABLE files (
        device_id INTEGER NOT NULL,
        path TEXT NOT NULL,
        sequence INTEGER NOT NULL UNIQUE,
        PRIMARY KEY (device_id, path)
    ) WITHOUT ROWID;
    INSERT INTO files(device_id, path, sequence) SELECT device_id, path, sequence FROM file_versions;
    """)

    static let columns = "v.path, v.hash, v.size, v.capture_date, v.mtime, v.device_sequence, d.name, v.sequence, v.recorded_at"

    static func fileRecord(_ row: Row) -> FileRecord {
        FileRecord(path: row.string(0) ?? "", hash: row.string(1) ?? "", size: row.int64(2),
                   captureDate: row.isNull(3) ? nil : row.int64(3), mtime: row.int64(4),
                   deviceSequence: row.int64(5), device: row.string(6), sequence: row.int64(7),
                   recordedAt: row.isNull(8) ? nil : row.int64(8))
    }

    /// The current version of (device, path), nil when there is none.
    static func current(deviceID: Int64, path: String, in db: Database) throws -> FileRecord? {
        try db.queryOne("""
            SELECT \(columns) FROM files f JOIN file_versions v ON v.sequence = f.sequence JOIN devices d ON d.id = v.device_id
            WHERE f.device_id = ? AND f.path = ?
            """, deviceID, path, row: fileRecord)
    }

    /// Records `record` (path and hash already validated) for `device`. Returns the
    /// stored record and whether anything changed (false: the same record was current).
    static func record(_ record: FileRecord, device: Metadata.Device, now: Int64, in db: Database) throws -> (FileRecord, Bool) {
        let existing = try current(deviceID: device.id, path: record.path, in: db)
        if let existing, existing.hash == record.hash, existing.size == record.size, existing.captureDate == record.captureDate,
           existing.mtime == record.mtime, existing.deviceSequence == record.deviceSequence {
            return (existing, false)
        }
        if let existing, existing.hash == record.hash, let old = existing.sequence {
            // The same content with new metadata: the same version, moved to the end of the feed.
            try db.run("DELETE FROM file_versions WHERE sequence = ?", old)
        }
        try db.run("""
            INSERT INTO file_versions(device_id, path, hash, size, capture_date, mtime, device_sequence, recorded_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """, device.id, record.path, record.hash, record.size, record.captureDate, record.mtime, record.deviceSequence, now)
        let sequence = db.lastInsertRowID
        try db.run("""
            INSERT INTO files(device_id, path, sequence) VALUES (?, ?, ?)
            ON CONFLICT(device_id, path) DO UPDATE SET sequence = excluded.sequence
            """, device.id, record.path, sequence)
        return (FileRecord(path: record.path, hash: record.hash, size: record.size, captureDate: record.captureDate, mtime: record.mtime,
                           deviceSequence: record.deviceSequence, device: device.name, sequence: sequence, recordedAt: now), true)
    }

    /// Where a listing page starts: after this path of this device (`device` nil: before every device).
    struct Cursor: Equatable {
        var device: String?
        var path: String
    }

    /// Current versions whose path starts with `prefix`, by device name then path,
    /// after `cursor`, at most `limit`; only `device`'s when it is given.
    static func listCurrent(device: String?, prefix: String, after cursor: Cursor, limit: Int64, in db: Database) throws -> [FileRecord] {
        // A range scan on files' primary key within a device: from the prefix up to the
        // prefix followed by the highest code point; substr() keeps exactly the paths
        // that start with it. Devices are few: their names order the pages.
        let pathFilter = "f.path >= ?1 AND f.path < ?2 AND substr(f.path, 1, length(?1)) = ?1"
        let select = "SELECT \(columns) FROM files f JOIN file_versions v ON v.sequence = f.sequence JOIN devices d ON d.id = f.device_id"
        if let device {
            return try db.query("""
                \(select) WHERE d.name = ?3 AND \(pathFilter) AND f.path > ?4 ORDER BY f.path LIMIT ?5
                """, prefix, prefix + "\u{10FFFF}", device, cursor.path, limit, row: fileRecord)
        }
        return try db.query("""
            \(select) WHERE \(pathFilter) AND (d.name > ?3 OR (d.name = ?3 AND f.path > ?4)) ORDER BY d.name, f.path LIMIT ?5
            """, prefix, prefix + "\u{10FFFF}", cursor.device ?? "", cursor.path, limit, row: fileRecord)
    }

    /// Every version of (device, path), oldest first (the last is the current one).
    static func versions(device: String, path: String, in db: Database) throws -> [FileRecord] {
        try db.query("""
            SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id
            WHERE d.name = ? AND v.path = ? ORDER BY v.sequence
            """, device, path, row: fileRecord)
    }

    /// Versions recorded (or re-recorded) after server sequence `since`, in order.
    static func changes(since: Int64, limit: Int64, in db: Database) throws -> [FileRecord] {
        try db.query("SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id WHERE v.sequence > ? ORDER BY v.sequence LIMIT ?",
                     since, limit, row: fileRecord)
    }
}
