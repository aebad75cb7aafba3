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
    /// takes the queue row with it). Cheap: one DELETE and one INSERT, no I/O beyond
    /// SQLite, no network. Replaying the same change sequence is a no-op. The caller
    /// decides whether the path qualifies (`CameraRollRules.isInCameraRoll`) and whether
    /// backup is on; after the transaction commits it calls `BackupEngine.wake()`.
    ///
    /// An older version of the same path that was never sent (pending, failed, or still
    /// being written) is dropped: the file was overwritten before its backup, so that
    /// content no longer exists in the drive under this name and backing it up would only
    /// waste the link. So the intermediate commits of a file written with a handle kept
    /// open leave one row, the last. A version already done stays done (its content stays
    /// on the server); one in flight finishes or fails on its own.
    ///
    /// `item.settled == false` (a writable handle is still open on the inode) queues the
    /// version without making it due: `settle(in:inode:)` does, at the last release.
    public static func enqueue(in db: Database, item: CameraRollCommit, now: Double = Clock.now()) throws {
        try db.run("""
            DELETE FROM backup_items
            WHERE path = ? AND state IN ('pending', 'failed') AND change_sequence < ?
            """, item.path, item.changeSequence)
        try db.run("""
            INSERT OR IGNORE INTO backup_items (change_sequence, inode, path, hash, size, mtime, blocks, settled, queued_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, item.changeSequence, item.inode, item.path, item.hash.hex, item.size, item.mtime,
            BlockListJSON.encode(item.blocks), item.settled, now)
    }

    /// The last writable handle of `inode` was released: its queued versions are final and
    /// become due. The drive calls this on its connection (in the transaction of the
    /// release's own commit, if it makes one), then `BackupEngine.wake()`. Returns how
    /// many items it made due.
    @discardableResult
    public static func settle(in db: Database, inode: UInt64) throws -> Int {
        try db.run("UPDATE backup_items SET settled = 1 WHERE inode = ? AND settled = 0", inode)
    }

    /// Every item becomes due: at mount, when no handle can be open any more (a killed
    /// mount leaves its last versions unsettled; they are what the files hold now).
    @discardableResult
    public static func settleAll(in db: Database) throws -> Int {
        try db.run("UPDATE backup_items SET settled = 1 WHERE settled = 0")
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

    /// The next settled pending item whose backoff has elapsed, oldest commit first.
    public func nextDue(now: Double) throws -> BackupItem? {
        try db.queryOne("""
            SELECT \(BackupItem.columns) FROM backup_items
            WHERE state = 'pending' AND settled = 1 AND next_attempt_at <= ? ORDER BY change_sequence LIMIT 1
            """, now) { try BackupItem(row: $0) }
    }

    /// When the earliest settled pending item becomes due, or nil when none is. Items
    /// still being written have no due time: `settle` wakes the engine for them.
    public func earliestDue() throws -> Double? {
        try db.queryOne("SELECT MIN(next_attempt_at) FROM backup_items WHERE state = 'pending' AND settled = 1") {
            $0.isNull(0) ? nil : $0.double(0)
        } ?? nil
    }

    /// Is this content already on the server through another item (done, sent or linked)?
    public func isHashDone(_ hash: SHA256Digest) throws -> Bool {
        try db.queryOne("SELECT 1 FROM backup_items WHERE hash = ? AND state = 'done' LIMIT 1", hash.hex) { _ in true } ?? false
    }

    /// Done items after `afterID`, in id order, at most `limit` (the audit's pages).
    public func doneItems(limit: Int, afterID: Int64) throws -> [BackupItem] {
        try db.query("SELECT \(BackupItem.columns) FROM backup_items WHERE state = 'done' AND id > ? ORDER BY id LIMIT ?",
                     afterID, limit) { try BackupItem(row: $0) }
    }

    /// Done items whose file record has not reached the server yet.
    public func unrecorded(limit: Int = 500) throws -> [BackupItem] {
        try db.query("""
            SELECT \(BackupItem.columns) FROM backup_items WHERE state = 'done' AND recorded = 0
            ORDER BY change_sequence LIMIT ?
            """, limit) { try BackupItem(row: $0) }
    }

    public struct Counts: Sendable, Equatable {
        /// `pending` counts settled items only; `writing` the pending ones not yet settled.
        public var pending = 0, uploading = 0, done = 0, failed = 0, writing = 0
        /// Bytes of pending, writing and uploading items the server does not hold yet
        /// (blocks it already had, zero blocks included, count as held once known).
        public var bytesLeft: Int64 = 0
        /// Everything still to back up, including versions still being written.
        public var itemsLeft: Int { pending + uploading + writing }
        /// What the uploader can work on now.
        public var itemsDue: Int { pending + uploading }

        public init(pending: Int = 0, uploading: Int = 0, done: Int = 0, failed: Int = 0, writing: Int = 0,
                    bytesLeft: Int64 = 0) {
            self.pending = pending; self.uploading = uploading; self.done = done; self.failed = failed
            self.writing = writing; self.bytesLeft = bytesLeft
        }
    }

    /// What is backed up: distinct contents whose upload is done, and their bytes (the
    /// same photo under two names counts once, as it is stored once).
    public func backedUp() throws -> (files: Int, bytes: Int64) {
        try db.queryOne("""
            SELECT COUNT(*), COALESCE(SUM(size), 0)
            FROM (SELECT hash, MAX(size) AS size FROM backup_items WHERE state = 'done' GROUP BY hash)
            """) { ($0.int(0), $0.int64(1)) } ?? (0, 0)
    }

    public func counts() throws -> Counts {
        var counts = Counts()
        _ = try db.query("""
            SELECT state, settled, COUNT(*), COALESCE(SUM(CASE WHEN size > bytes_sent THEN size - bytes_sent ELSE 0 END), 0)
            FROM backup_items GROUP BY state, settled
            """) { row -> Void in
            let n = row.int(2)
            let settled = row.int(1) != 0
            switch BackupItemState(rawValue: row.string(0) ?? "") {
            case .pending where settled: counts.pending += n; counts.bytesLeft += row.int64(3)
            case .pending: counts.writing += n; counts.bytesLeft += row.int64(3)
            case .uploading: counts.uploading += n; counts.bytesLeft += row.int64(3)
            case .done: counts.done += n
            case .failed: counts.failed += n
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

    /// done → pending, due now, for version `hash` of `path`: the server said it does not
    /// hold that content any more (reset, or restored from an older copy). Sent again
    /// from the start (the plan tells which blocks it still has), and recorded again.
    @discardableResult
    public func requeueDone(path: String, hash: SHA256Digest, reason: String) throws -> Int {
        try requeueDone(where: "path = ? AND hash = ?", reason: reason, path, hash.hex)
    }

    /// The same for one item.
    @discardableResult
    public func requeueDone(id: Int64, reason: String) throws -> Bool {
        try requeueDone(where: "id = ?", reason: reason, id) == 1
    }

    private func requeueDone(where condition: String, reason: String, _ arguments: SQLBindable...) throws -> Int {
        try db.run("""
            UPDATE backup_items SET state = 'pending', linked = 0, recorded = 0, bytes_sent = 0, attempts = 0,
                next_attempt_at = 0, last_error = ?, finished_at = NULL
            WHERE state = 'done' AND \(condition)
            """, arguments: [reason] + arguments)
    }

    public func saveProgress(_ id: Int64, bytesSent: Int64) throws {
        try db.run("UPDATE backup_items SET bytes_sent = ? WHERE id = ?", bytesSent, id)
    }

    public func saveCaptureDate(_ id: Int64, _ date: CaptureDate) throws {
        try db.run("UPDATE backup_items SET capture_date = ?, capture_source = ? WHERE id = ?",
                   date.value, date.source.rawValue, id)
    }

    /// Marks as done (linked, not yet recorded) every settled pending or failed item whose
    /// content is in `present`. A version still being written is left alone: its record
    /// would name a partial file on the server. Returns how many changed.
    @discardableResult
    public func linkPresent(_ present: Set<SHA256Digest>, now: Double = Clock.now()) throws -> Int {
        guard !present.isEmpty else { return 0 }
        return try db.transaction {
            var changed = 0
            for hash in present {
                changed += try db.run("""
                    UPDATE backup_items SET state = 'done', linked = 1, recorded = 0, bytes_sent = 0, upload_url = NULL,
                        url_expires_at = NULL, failure_reason = NULL, last_error = NULL, finished_at = ?
                    WHERE hash = ? AND state IN ('pending', 'failed') AND settled = 1
                    """, now, hash.hex)
            }
            return changed
        }
    }

    /// Distinct content hashes of settled items not yet done, in hash order (paged by
    /// `after`), for batch dedup queries.
    public func undoneHashes(limit: Int, after: String = "") throws -> [SHA256Digest] {
        try db.query("""
            SELECT DISTINCT hash FROM backup_items WHERE state IN ('pending', 'failed') AND settled = 1 AND hash > ?
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
