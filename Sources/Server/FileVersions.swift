import Crypto
import Protocol
import Storage

/// File records keyed by (device, path), with every version kept.
///
/// One table, `file_versions`: a row per version, its `sequence` the version's position
/// in the change feed. The current version of a (device, path) is its row with the
/// highest sequence, found through the index on (device, path, sequence); so deleting
/// the current version makes the previous one current with nothing else to update,
/// and recording a version writes one row and one index entry (a second table of
/// current versions cost twice the pages per record; measured with the server's
/// write counter in BackupEndToEndTests).
///
/// A *version* is a content: recording another hash for a (device, path) adds a
/// version and keeps the older ones. Recording the current hash again with other
/// metadata (mtime, capture date, device sequence) replaces that version's metadata
/// and moves it to the end of the feed (a new sequence), since its bytes are the same.
/// Nothing a device sends deletes a version; only `BackupAdmin` does. Sequences are
/// never reused: the admin records the highest one in `settings` before deleting
/// (`sequenceFloorKey`), and new sequences start above it.
/// Every function here runs inside the caller's `Metadata.withSession`, on either database.
enum FileVersions {
    /// `server-003-versions`: moves `files` (one record per path: the last device to
    /// record a path replaced the record of any other) to per-device versions. Every
    /// record still there becomes the current and only version of (its device, its
    /// path) with its sequence unchanged, so change-feed cursors stay valid. Records
    /// replaced before this migration are gone from the old table; their contents stay
    /// stored and downloadable by hash.
    static let migration = Migration("server-003-versions", """
    CREATE TABLE file_versions (
        sequence INTEGER PRIMARY KEY,
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
    """)

    /// `server-005-deletions`: the administrator's deletions as entries of the change
    /// feed, so a follower (a mounted drive's `Backups/`) removes a deleted version
    /// without listing everything again. Each deleted version gets one row with a
    /// sequence of its own (from the same sequence space as versions) naming the
    /// version's sequence.
    static let deletionsMigration = Migration("server-005-deletions", """
    CREATE TABLE version_deletions (
        sequence INTEGER PRIMARY KEY,
        device_id INTEGER NOT NULL,
        path TEXT NOT NULL,
        hash TEXT NOT NULL,
        version_sequence INTEGER NOT NULL,
        deleted_at INTEGER NOT NULL
    );
    """)

    /// `settings` key: the highest sequence ever handed out, written before a deletion.
    static let sequenceFloorKey = "version_sequence_floor"

    static let columns = "v.path, v.hash, v.size, v.capture_date, v.mtime, v.device_sequence, d.name, v.sequence, v.recorded_at"

    static func fileRecord(_ row: any RecordRow) -> FileRecord {
        FileRecord(path: row.string(0) ?? "", hash: row.string(1) ?? "", size: row.int64(2),
                   captureDate: row.isNull(3) ? nil : row.int64(3), mtime: row.int64(4),
                   deviceSequence: row.int64(5), device: row.string(6), sequence: row.int64(7),
                   recordedAt: row.isNull(8) ? nil : row.int64(8))
    }

    /// The current version of (device, path), nil when there is none.
    static func current(deviceID: Int64, path: String, in db: any RecordSession) throws -> FileRecord? {
        try db.queryOne("""
            SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id
            WHERE v.device_id = ? AND v.path = ? ORDER BY v.sequence DESC LIMIT 1
            """, deviceID, path, row: fileRecord)
    }

    /// The next sequence: above every row and above the highest ever deleted.
    static func nextSequence(in db: any RecordSession) throws -> Int64 {
        let highest = try db.queryOne("SELECT COALESCE(MAX(sequence), 0) FROM file_versions") { $0.int64(0) } ?? 0
        // The floor is stored as the bytes of its decimal digits (settings.value is BLOB / BYTEA).
        let number = db.dialect == .sqlite ? "CAST(value AS INTEGER)" : "CAST(convert_from(value, 'UTF8') AS BIGINT)"
        let floor = try db.queryOne("SELECT \(number) FROM settings WHERE key = ?", sequenceFloorKey) { $0.int64(0) } ?? 0
        let deletion = try db.queryOne("SELECT COALESCE(MAX(sequence), 0) FROM version_deletions") { $0.int64(0) } ?? 0
        return max(highest, floor, deletion) + 1
    }

    /// Records `sequence` as the highest ever handed out (before a deletion may remove it).
    static func setSequenceFloor(_ sequence: Int64, in db: any RecordSession) throws {
        try db.run("INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                   sequenceFloorKey, Array(String(sequence).utf8))
    }

    /// Records `record` (path and hash already validated) for `device`. Returns the
    /// stored record and whether anything changed (false: the same record was current).
    static func record(_ record: FileRecord, device: Metadata.Device, now: Int64, in db: any RecordSession) throws -> (FileRecord, Bool) {
        let existing = try current(deviceID: device.id, path: record.path, in: db)
        if let existing, existing.hash == record.hash, existing.size == record.size, existing.captureDate == record.captureDate,
           existing.mtime == record.mtime, existing.deviceSequence == record.deviceSequence {
            return (existing, false)
        }
        // Taken before a delete below, which may remove the highest sequence (never reused).
        let sequence = try nextSequence(in: db)
        if let existing, existing.hash == record.hash, let old = existing.sequence {
            // The same content with new metadata: the same version, moved to the end of the feed.
            try db.run("DELETE FROM file_versions WHERE sequence = ?", old)
        }
        try db.run("""
            INSERT INTO file_versions(sequence, device_id, path, hash, size, capture_date, mtime, device_sequence, recorded_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, sequence, device.id, record.path, record.hash, record.size, record.captureDate, record.mtime, record.deviceSequence, now)
        try ChangeFeed.records.announce(in: db)
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
    static func listCurrent(device: String?, prefix: String, after cursor: Cursor, limit: Int64, in db: any RecordSession) throws -> [FileRecord] {
        // Devices are few: walk them by name, each one a range scan of the index.
        let devices: [(Int64, String)]
        if let device {
            devices = try db.query("SELECT id, name FROM devices WHERE name = ?", device) { ($0.int64(0), $0.string(1) ?? "") }
        } else {
            devices = try db.query("SELECT id, name FROM devices WHERE name >= ? ORDER BY name", cursor.device ?? "") { ($0.int64(0), $0.string(1) ?? "") }
        }
        var out: [FileRecord] = []
        for (id, name) in devices where out.count < Int(limit) {
            let after = device != nil || name == cursor.device ? cursor.path : ""
            out += try listCurrent(deviceID: id, prefix: prefix, after: after, limit: limit - Int64(out.count), in: db)
        }
        return out
    }

    /// One device's current versions under `prefix`, by path, after `after`.
    private static func listCurrent(deviceID: Int64, prefix: String, after: String, limit: Int64, in db: any RecordSession) throws -> [FileRecord] {
        // A range scan of (device, path, sequence): from the prefix up to the prefix
        // followed by the highest code point (substr() keeps exactly the paths that
        // start with it); MAX(sequence) per path is the current version.
        try db.query("""
            SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id
            WHERE v.sequence IN (
                SELECT MAX(sequence) FROM file_versions
                WHERE device_id = ?3 AND path >= ?1 AND path < ?2 AND substr(path, 1, length(?1)) = ?1 AND path > ?4
                GROUP BY path ORDER BY path LIMIT ?5)
            ORDER BY v.path
            """, prefix, prefix + "\u{10FFFF}", deviceID, after, limit, row: fileRecord)
    }

    /// Every version of (device, path), oldest first (the last is the current one).
    static func versions(device: String, path: String, in db: any RecordSession) throws -> [FileRecord] {
        try db.query("""
            SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id
            WHERE v.device_id = (SELECT id FROM devices WHERE name = ?) AND v.path = ? ORDER BY v.sequence
            """, device, path, row: fileRecord)
    }

    /// Versions recorded (or re-recorded) after server sequence `since`, in order.
    static func changes(since: Int64, limit: Int64, in db: any RecordSession) throws -> [FileRecord] {
        try db.query("SELECT \(columns) FROM file_versions v JOIN devices d ON d.id = v.device_id WHERE v.sequence > ? ORDER BY v.sequence LIMIT ?",
                     since, limit, row: fileRecord)
    }

    /// Deletes the versions with these sequences and records each deletion in the feed
    /// under a new sequence. Runs in the caller's transaction.
    static func delete(sequences: [Int64], now: Int64, in db: any RecordSession) throws {
        for old in sequences {
            let next = try nextSequence(in: db)
            try db.run("""
                INSERT INTO version_deletions(sequence, device_id, path, hash, version_sequence, deleted_at)
                SELECT CAST(? AS BIGINT), device_id, path, hash, sequence, CAST(? AS BIGINT) FROM file_versions WHERE sequence = ?
                """, next, now, old)
            try db.run("DELETE FROM file_versions WHERE sequence = ?", old)
        }
        if !sequences.isEmpty { try ChangeFeed.records.announce(in: db) }
    }

    /// Deletions recorded after server sequence `since`, in order.
    static func deletions(since: Int64, limit: Int64, in db: any RecordSession) throws -> [VersionDeletion] {
        try db.query("""
            SELECT x.sequence, d.name, x.path, x.hash, x.version_sequence FROM version_deletions x JOIN devices d ON d.id = x.device_id
            WHERE x.sequence > ? ORDER BY x.sequence LIMIT ?
            """, since, limit) {
            VersionDeletion(sequence: $0.int64(0), device: $0.string(1) ?? "", path: $0.string(2) ?? "", hash: $0.string(3) ?? "", version: $0.int64(4))
        }
    }
}
