import Crypto
import Foundation
import Storage

/// The two tasks' work on one database connection: drain the queue (`us.virtualdrive.backup`)
/// and sync with the server (`us.virtualdrive.sync`), plus the cursor and the status.
/// Used by the engine's thread and by `BackupEngine.runOnce`; not thread-safe.
final class BackupWorker {
    let queue: BackupQueue
    let transport: BackupTransport
    /// Where the blocks are (the audit checks a version can still be sent).
    let blobs: BackupBlobSource
    let stateFolder: String
    let settings: () -> BackupSettings
    let policy: BackupPolicy
    let shouldContinue: @Sendable () -> Bool
    let clock: () -> Double
    let monotonic: () -> Double
    private(set) var uploader: ItemUploader!
    private var lock: UploadLock?

    // Progress of the current run (since the queue was last empty).
    private var runCompleted = 0
    private var rate = RateEstimator()
    private var eta = EtaFormatter()
    private var lastTransientError: (message: String, retryAt: Double)?
    /// The server's last "full" answer (507), until an item goes through again.
    private var serverFull: (message: String, retryAt: Double)?

    init(db: Database, transport: BackupTransport, blobs: BackupBlobSource, stateFolder: String,
         uploader configuration: UploaderConfiguration, settings: @escaping () -> BackupSettings, policy: BackupPolicy,
         shouldContinue: @escaping @Sendable () -> Bool, clock: @escaping () -> Double = Clock.now,
         monotonic: @escaping () -> Double = Clock.monotonic,
         random: @escaping () -> Double = { Double.random(in: 0..<1) },
         onProgress: @escaping (BackupWorker) -> Void = { _ in }) {
        queue = BackupQueue(db: db)
        self.transport = transport
        self.blobs = blobs
        self.stateFolder = stateFolder
        self.settings = settings
        self.policy = policy
        self.shouldContinue = shouldContinue
        self.clock = clock
        self.monotonic = monotonic
        uploader = nil
        uploader = ItemUploader(
            queue: queue, transport: transport, blobs: blobs, configuration: configuration, clock: clock, random: random,
            shouldContinue: shouldContinue,
            currentHold: { [unowned self] in self.currentHold() },
            onBytesSent: { [unowned self] bytes in
                self.rate.record(bytes: bytes, at: self.monotonic())
                onProgress(self)
            })
    }

    func currentHold() -> BackupHold? { policy.hold(for: settings(), now: monotonic()) }

    // MARK: - us.virtualdrive.backup

    enum DrainResult: Equatable {
        /// Nothing is due; `nextDue` is when the earliest backoff ends (nil: queue empty).
        case empty(nextDue: Double?)
        case held(BackupHold)
        /// Another process holds the upload lock.
        case busy
        case stopped
    }

    /// Uploads due items, oldest commit first (several in flight), until none is due, a
    /// hold applies, or stop. `onItem` is called after each item with its outcome.
    func drain(onItem: (BackupItem, UploadOutcome) -> Void = { _, _ in }) throws -> DrainResult {
        guard try takeLock() else { return .busy }
        let end = try uploader.run(next: { try queue.nextDue(now: clock()) }) { item, outcome in
            switch outcome {
            case .sent, .linked, .failed:
                runCompleted += 1
                serverFull = nil
                try updateCursor()
            case .retry(let at, let error):
                lastTransientError = (error, at)
            case .serverFull(let at, let message):
                serverFull = (message, at)
            case .held, .stopped, .superseded:
                break
            }
            onItem(item, outcome)
        }
        switch end {
        case .idle:
            let nextDue = try queue.earliestDue()
            if nextDue == nil { runCompleted = 0; lastTransientError = nil; serverFull = nil }
            rate.pause()
            return .empty(nextDue: nextDue)
        case .held(let hold):
            rate.pause()
            return .held(hold)
        case .stopped:
            return .stopped
        }
    }

    /// The path of the oldest item in flight.
    var currentPath: String? { uploader.currentPath }

    /// Takes the cross-process upload lock if we do not hold it; on taking it, rows left
    /// `uploading` by a previous holder (killed, or stopped mid-item) go back to pending.
    private func takeLock() throws -> Bool {
        if lock != nil { return true }
        guard let acquired = try UploadLock.acquire(stateFolder: stateFolder) else { return false }
        lock = acquired
        try queue.recoverInterrupted()
        return true
    }

    /// Lets another process upload (the engine calls this when idle).
    func releaseLock() { lock = nil }

    // MARK: - us.virtualdrive.sync

    struct SyncReport: Equatable {
        var serverWatermark: BackupWatermark?
        var linked: Int
        /// Done versions the server no longer holds, queued again.
        var requeued: Int
        var recorded: Int
        var pushed: BackupWatermark?
    }

    /// Refreshes what the server knows: its watermark, which queued hashes it already has
    /// (linked without sending), file records not yet pushed, and our cursor.
    func sync() throws -> SyncReport {
        let server = try transport.watermark()
        if let server, let data = try? JSONEncoder().encode(server) {
            try queue.setMeta("server-watermark", String(decoding: data, as: UTF8.self))
        }
        let linked = try learnFromServer()
        let requeued = try auditDone()
        let recorded = try pushRecords()
        let pushed = try pushWatermark()
        return SyncReport(serverWatermark: server, linked: linked, requeued: requeued, recorded: recorded, pushed: pushed)
    }

    /// Checks, `batchSize` items per request, that the server still holds every content
    /// the queue counts as done. A version it lacks (the server was reset, restored from
    /// a copy older than the backup, or is another workspace) goes back to pending and is
    /// sent again, when this drive still holds its blocks; one whose blocks are gone here
    /// (the photo deleted or replaced since) has nothing left to send and stays as it is.
    /// Run with every sync: at start and then hourly.
    func auditDone(batchSize: Int = 1000) throws -> Int {
        var requeued = 0
        var after: Int64 = 0
        while true {
            let items = try queue.doneItems(limit: batchSize, afterID: after)
            guard let last = items.last else { break }
            let present = try transport.presentContents(Array(Set(items.map(\.hash))))
            for item in items where !present.contains(item.hash) && holdsBlocks(of: item) {
                let reason = "the server no longer holds this version (reset, restored from an older copy, or another workspace): sent again"
                if try queue.requeueDone(id: item.id, reason: reason) { requeued += 1 }
            }
            after = last.id
            if items.count < batchSize { break }
        }
        return requeued
    }

    /// Whether every non-zero block of `item` can be read here.
    private func holdsBlocks(of item: BackupItem) -> Bool {
        item.blocks.enumerated().allSatisfy { index, digest in
            if Blocks.isZero(digest, length: Blocks.length(ofBlock: index, fileSize: item.size)) { return true }
            guard let fd = try? blobs.openBlock(digest) else { return false }
            FileIO.close(fd)
            return true
        }
    }

    /// Marks every settled pending or failed item whose content the server already holds
    /// as done (linked), asking in batches of `batchSize` content hashes. This is how a new device, or a
    /// reinstall with an empty state, learns what is backed up: by content, not by
    /// sequence (another catalog's sequences do not name the same files).
    func learnFromServer(batchSize: Int = 500) throws -> Int {
        var linked = 0
        var after = ""
        while true {
            let hashes = try queue.undoneHashes(limit: batchSize, after: after)
            guard let last = hashes.last else { break }
            let present = try transport.presentContents(hashes)
            linked += try queue.linkPresent(present.intersection(hashes), now: clock())
            after = last.hex
            if hashes.count < batchSize { break }
        }
        if linked > 0 { try updateCursor() }
        return linked
    }

    /// Pushes the file records of done items that have not reached the server.
    func pushRecords() throws -> Int {
        var count = 0
        while true {
            let batch = try queue.unrecorded(limit: 200)
            if batch.isEmpty { return count }
            for item in batch {
                try transport.recordFile(BackupRecord(path: item.path, hash: item.hash, size: item.size, blocks: item.blocks,
                                                    captureDate: item.captureDate, mtime: item.mtime,
                                                    changeSequence: item.changeSequence))
                try queue.markRecorded(item.id)
                count += 1
            }
        }
    }

    // MARK: - Cursor

    /// Recomputes the cursor: the highest change sequence at or below which every item is
    /// done. A failed item holds the cursor back until it is retried and done: the cursor
    /// promises "backed up", and a failed photo is not. Never moves backwards.
    @discardableResult
    func updateCursor() throws -> BackupWatermark {
        let firstUndone = try queue.db.queryOne("SELECT MIN(change_sequence) FROM backup_items WHERE state != 'done'") {
            $0.isNull(0) ? nil : $0.int64(0)
        } ?? nil
        let highest = try queue.db.queryOne("SELECT COALESCE(MAX(change_sequence), 0) FROM backup_items") { $0.int64(0) } ?? 0
        let stored = try queue.meta("cursor").flatMap { Int64($0) } ?? 0
        let cursor = max(stored, firstUndone.map { $0 - 1 } ?? highest)
        let newest = try queue.db.queryOne("""
            SELECT MAX(capture_date) FROM backup_items WHERE state = 'done' AND change_sequence <= ?
            """, cursor) { $0.string(0) } ?? nil
        try queue.setMeta("cursor", String(cursor))
        if let newest { try queue.setMeta("newest-capture-date", newest) }
        return BackupWatermark(sequence: cursor, newestCaptureDate: try newest ?? queue.meta("newest-capture-date"))
    }

    /// Sends the cursor to the server when it moved since the last push.
    func pushWatermark() throws -> BackupWatermark? {
        let watermark = try updateCursor()
        let pushed = try queue.meta("pushed-cursor").flatMap { Int64($0) } ?? -1
        guard watermark.sequence > pushed else { return nil }
        try transport.setWatermark(watermark)
        try queue.setMeta("pushed-cursor", String(watermark.sequence))
        return watermark
    }

    // MARK: - Status

    /// What the engine is doing, as the status shows it.
    enum Phase: Equatable {
        case uploading
        case held(BackupHold)
        case busy
        case resting
        /// The engine stopped (unmount): what is left waits for the next mount or timer.
        case stopped
    }

    func status(_ phase: Phase) throws -> BackupStatus {
        let counts = try queue.counts()
        let cursor = try queue.meta("cursor").flatMap { Int64($0) } ?? 0
        var status = BackupStatus(state: .idle, itemsLeft: counts.itemsLeft, bytesLeft: counts.bytesLeft,
                                  itemsFailed: counts.failed, itemsDone: counts.done, cursor: cursor, updatedAt: clock())
        status.itemsTotal = runCompleted + counts.itemsLeft
        status.itemNumber = min(runCompleted + 1, status.itemsTotal)
        (status.backedUpFiles, status.backedUpBytes) = try queue.backedUp()
        switch phase {
        case .held(.off):
            status.state = .off
            status.waitingReason = BackupHold.off.reason
            status.waitingCode = BackupHold.off.code
        case .held(let hold):
            // Waiting even with nothing left: a user who paused should see "Paused".
            status.state = .waiting
            status.waitingReason = hold.reason
            status.waitingCode = hold.code
        case .busy:
            status.state = counts.itemsLeft > 0 ? .waiting : .idle
            status.waitingReason = "Another vdrive process is backing up"
            status.waitingCode = "other-process"
        case .stopped:
            status.state = counts.itemsLeft > 0 ? .waiting : .idle
            status.waitingReason = counts.itemsLeft > 0 ? "Not running; backup goes on at the next mount or timer run" : nil
            status.waitingCode = counts.itemsLeft > 0 ? "stopped" : nil
        case .uploading, .resting:
            if counts.itemsLeft == 0 {
                status.state = .idle
            } else if counts.itemsDue == 0 {
                // Only versions still being written: nothing to send until they settle.
                status.state = .waiting
                status.waitingReason = counts.writing == 1
                    ? "Waiting for 1 file still being written"
                    : "Waiting for \(counts.writing) files still being written"
                status.waitingCode = "writing"
            } else if phase == .uploading {
                status.state = .backingUp
                status.currentPath = currentPath
                if let bps = rate.bytesPerSecond, bps > 0 {
                    status.rateBytesPerSecond = bps
                    status.etaSeconds = Double(counts.bytesLeft) / bps
                    status.etaText = eta.text(secondsLeft: Double(counts.bytesLeft) / bps)
                }
            } else {
                status.state = .waiting
                if let full = serverFull {
                    let wait = max(0, full.retryAt - clock())
                    var waitEta = EtaFormatter()
                    status.waitingReason = "Waiting: the workspace server is full; backup goes on by itself once it has room (next try in \(waitEta.text(secondsLeft: wait)))"
                    status.waitingCode = "server-full"
                    status.lastError = full.message   // the server's figures and what its administrator can do
                } else if let error = lastTransientError {
                    let wait = max(0, error.retryAt - clock())
                    var waitEta = EtaFormatter()
                    status.waitingReason = "Retrying after an error (\(error.message)); next try in \(waitEta.text(secondsLeft: wait))"
                    status.waitingCode = "retrying"
                } else {
                    status.waitingReason = "Waiting to retry"
                    status.waitingCode = "retrying"
                }
            }
        }
        return status
    }
}
