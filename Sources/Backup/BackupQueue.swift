import Crypto
import Storage

/// The durable upload queue: the SQL of every state transition, in one place.
///
/// A `BackupQueue` wraps a connection its caller owns for the duration of each call.
/// Each method is one statement or one transaction, so a kill between two calls leaves
/// a state that the next run recovers (Docs/backup.md walks through every kill point).
public struct BackupQueue {
    public let db: Database

    public init(db: Database) { self.db = db }

    /// Creates the backup tables if needed. The drive runs these with its own migrations.
    public func migrate() throws { try BackupSchema.apply(to: db) }

    // MARK: - The drive's hook

    /// Queues a camera-roll commit. Call it INSIDE the drive's commit transaction, on the
    /// drive's connection, so a file is never committed without being queued (a rollback
    /// takes the queue row with it). Cheap: one INSERT, no I/O beyond SQLite, no network.
    /// Replaying the same change sequence is a no-op. The caller decides whether the
    /// path qualifies (`CameraRollRules.isInCameraRoll`) and whether backup is on; after
    /// the transaction commits it calls `BackupEngine.wake()`.
    ///
    /// An older version of the same path that was never sent (pending or failed) is
    /// dropped: the file was overwritten before its backup, so that content no longer
    /// exists in the drive under this name and backing it up would only waste the link.
    /// A version already done stays done (its blob stays on the server); one in flight
    /// finishes or fails on its own.
    public static func enqueue(in db: Database, item: CameraRollCommit, now: Double = Clock.now()) throws {
        try db.run("""
            DELETE FROM backup_items
            WHERE path = ? AND hash != ? AND state IN ('pending', 'failed') AND change_sequence < ?
            """, item.path, item.hash.hex, item.changeSequence)
        try db.run("""
            INSERT OR IGNORE INTO backup_items (change_sequence, inode, path, hash, size, mtime, queued_at)
            VALUES (?, ?, ?, ?, ?, ?, ?)
            """, item.changeSequence, item.inode, item.path, item.hash.hex, item.size, item.mtime, now)
    }

    // MARK: - Reading

    public func item(id: Int64) throws -> BackupItem? {
        try db.queryOne("SELECT \(BackupItem.columns) FROM backup_items WHERE id = ?", id) { try BackupItem(row: $0) }
    }

    public func items(in state: BackupItemState) throws -> [BackupItem] {
        try db.query("SELECT \(BackupItem.columns) FROM backup_items WHERE state = ? ORDER BY change_sequence",
                     state.rawValue) { try BackupItem(row: $0) }
    }

    public func allItems() throws -> [BackupItem] {
        try db.query("SELECT \(BackupItem.columns) FROM backup_items ORDER BY change_sequence") { try BackupItem(row: $0) }
    }

    /// The latest item for a workspace path (the version the file has now, or had last).
    public func latestItem(path: String) throws -> BackupItem? {
        try db.queryOne("SELECT \(BackupItem.columns) FROM backup_items WHERE path = ? ORDER BY change_sequence DESC LIMIT 1",
                        path) { try BackupItem(row: $0) }
    }

    /// The latest item for an inode (a renamed file keeps its inode; its row keeps the old path).
    public func latestItem(inode: UInt64) throws -> BackupItem? {
        try db.queryOne("SELECT \(BackupItem.columns) FROM backup_items WHERE inode = ? ORDER BY change_sequence DESC LIMIT 1",
                        inode) { try BackupItem(row: $0) }
    }

    /// The next pending item whose backoff has elapsed, oldest commit first.
    public func nextDue(now: Double) throws -> BackupItem? {
        try db.queryOne("""
            SELECT \(BackupItem.columns) FROM backup_items
            WHERE state = 'pending' AND next_attempt_at <= ? ORDER BY change_sequence LIMIT 1
            """, now) { try BackupItem(row: $0) }
    }

    /// When the earliest waiting item becomes due, or nil when nothing is pending.
    public func earliestDue() throws -> Double? {
        try db.queryOne("SELECT MIN(next_attempt_at) FROM backup_items WHERE state = 'pending'") {
            $0.isNull(0) ? nil : $0.double(0)
        } ?? nil
    }

    /// Is this content already on the server through another item (done, sent or linked)?
    public func isHashDone(_ hash: SHA256Digest) throws -> Bool {
        try db.queryOne("SELECT 1 FROM backup_items WHERE hash = ? AND state = 'done' LIMIT 1", hash.hex) { _ in true } ?? false
    }

    /// Done items whose file record has not reached the server yet.
    public func unrecorded(limit: Int = 500) throws -> [BackupItem] {
        try db.query("""
            SELECT \(BackupItem.columns) FROM backup_items WHERE state = 'done' AND recorded = 0
            ORDER BY change_sequence LIMIT ?
            """, limit) { try BackupItem(row: $0) }
    }

    public struct Counts: Sendable, Equatable {
        public var pending = 0, uploading = 0, done = 0, failed = 0
        /// Bytes of pending and uploading items not yet acknowledged by the server.
        public var bytesLeft: Int64 = 0
        public var itemsLeft: Int { pending + uploading }
    }

    public func counts() throws -> Counts {
        var counts = Counts()
        _ = try db.query("""
            SELECT state, COUNT(*), COALESCE(SUM(CASE WHEN size > bytes_sent THEN size - bytes_sent ELSE 0 END), 0)
            FROM backup_items GROUP BY state
            """) { row -> Void in
            let n = row.int(1)
            switch BackupItemState(rawValue: row.string(0) ?? "") {
            case .pending: counts.pending = n; counts.bytesLeft += row.int64(2)
            case .uploading: counts.uploading = n; counts.bytesLeft += row.int64(2)
            case .done: counts.done = n
            case .failed: counts.failed = n
            case nil: break
            }
        }
        return counts
    }

    // MARK: - Transitions

    /// pending → uploading. Only the holder of the upload lock calls this. False when the
    /// row is no longer pending (the drive dropped it for a newer version meanwhile).
    @discardableResult
    public func markUploading(_ id: Int64) throws -> Bool {
        try db.run("UPDATE backup_items SET state = 'uploading' WHERE id = ? AND state = 'pending'", id) == 1
    }

    /// → done. `linked`: nothing was sent, the server already had the content.
    /// `recorded`: the file record reached the server too.
    public func markDone(_ id: Int64, linked: Bool, recorded: Bool, now: Double = Clock.now()) throws {
        try db.run("""
            UPDATE backup_items SET state = 'done', linked = ?, recorded = ?, bytes_sent = CASE WHEN ? THEN 0 ELSE size END,
                upload_url = NULL, url_expires_at = NULL, failure_reason = NULL, last_error = NULL, finished_at = ?
            WHERE id = ?
            """, linked, recorded, linked, now, id)
    }

    public func markRecorded(_ id: Int64) throws {
        try db.run("UPDATE backup_items SET recorded = 1 WHERE id = ?", id)
    }

    /// → failed, for good until `retryFailed`. The reason is shown to the user.
    public func markFailed(_ id: Int64, reason: String, now: Double = Clock.now()) throws {
        try db.run("""
            UPDATE backup_items SET state = 'failed', failure_reason = ?, upload_url = NULL, url_expires_at = NULL,
                bytes_sent = 0, finished_at = ?
            WHERE id = ?
            """, reason, now, id)
    }

    /// → pending, not before `at`: a transient error, counted for the backoff.
    public func scheduleRetry(_ id: Int64, at: Double, error: String, integrityFailure: Bool = false) throws {
        try db.run("""
            UPDATE backup_items SET state = 'pending', attempts = attempts + 1, next_attempt_at = ?, last_error = ?,
                integrity_failures = integrity_failures + ?
            WHERE id = ?
            """, at, error, integrityFailure ? 1 : 0, id)
    }

    /// → pending, due now, without counting an attempt (stopped, paused, policy hold).
    public func release(_ id: Int64) throws {
        try db.run("UPDATE backup_items SET state = 'pending' WHERE id = ? AND state = 'uploading'", id)
    }

    /// Every `uploading` row back to pending: called by the new holder of the upload lock,
    /// whose predecessor (killed or stopped) cannot be uploading any more.
    @discardableResult
    public func recoverInterrupted() throws -> Int {
        try db.run("UPDATE backup_items SET state = 'pending' WHERE state = 'uploading'")
    }

    /// failed → pending, due now, with fresh counters. Returns how many were reset.
    @discardableResult
    public func retryFailed() throws -> Int {
        try db.run("""
            UPDATE backup_items SET state = 'pending', failure_reason = NULL, attempts = 0, integrity_failures = 0,
                next_attempt_at = 0, last_error = NULL, finished_at = NULL
            WHERE state = 'failed'
            """)
    }

    public func saveUpload(_ id: Int64, url: String?, expiresAt: Double?) throws {
        try db.run("UPDATE backup_items SET upload_url = ?, url_expires_at = ? WHERE id = ?", url, expiresAt, id)
    }

    public func saveProgress(_ id: Int64, bytesSent: Int64) throws {
        try db.run("UPDATE backup_items SET bytes_sent = ? WHERE id = ?", bytesSent, id)
    }

    public func saveCaptureDate(_ id: Int64, _ date: CaptureDate) throws {
        try db.run("UPDATE backup_items SET capture_date = ?, capture_source = ? WHERE id = ?",
                   date.value, date.source.rawValue, id)
    }

    /// Marks as done (linked, not yet recorded) every pending or failed item whose content
    /// is in `present`. Returns how many changed.
    @discardableResult
    public func linkPresent(_ present: Set<SHA256Digest>, now: Double = Clock.now()) throws -> Int {
        guard !present.isEmpty else { return 0 }
        return try db.transaction {
            var changed = 0
            for hash in present {
                changed += try db.run("""
                    UPDATE backup_items SET state = 'done', linked = 1, recorded = 0, bytes_sent = 0, upload_url = NULL,
                        url_expires_at = NULL, failure_reason = NULL, last_error = NULL, finished_at = ?
                    WHERE hash = ? AND state IN ('pending', 'failed')
                    """, now, hash.hex)
            }
            return changed
        }
    }

    /// Distinct hashes of items not yet done, oldest first, for batch dedup queries.
    public func undoneHashes(limit: Int, after: String = "") throws -> [SHA256Digest] {
        try db.query("""
            SELECT DISTINCT hash FROM backup_items WHERE state IN ('pending', 'failed') AND hash > ?
            ORDER BY hash LIMIT ?
            """, after, limit) { $0.string(0).flatMap(SHA256Digest.init(hex:)) }.compactMap { $0 }
    }

    // MARK: - Meta

    public func meta(_ key: String) throws -> String? {
        try db.queryOne("SELECT value FROM backup_meta WHERE key = ?", key) { $0.string(0) } ?? nil
    }

    public func setMeta(_ key: String, _ value: String) throws {
        try db.run("INSERT INTO backup_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                   key, value)
    }
}
