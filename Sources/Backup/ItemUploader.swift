import Crypto
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// How one item's turn ended.
public enum UploadOutcome: Sendable, Equatable {
    /// The server recorded the file after this device sent (some of) its blocks.
    case sent
    /// The server (or an earlier item) already had the content: nothing was sent.
    case linked
    case failed(reason: String)
    /// A transient error: the item is pending again, due at this time.
    case retry(at: Double, error: String)
    /// The workspace server is full (its quota): pending again, tried at this time.
    case serverFull(at: Double, message: String)
    /// A policy held it back between blocks: pending again, due now.
    case held(BackupHold)
    /// Stop was requested (unmount): pending again, due now; the server keeps its offsets.
    case stopped
    /// The row left `pending` before its turn (a newer version replaced it): not touched.
    case superseded
}

public struct UploaderConfiguration: Sendable {
    /// An upload plan whose URLs expire sooner than this is renewed before the next block.
    public var urlRenewMargin: Double = 60
    public var retry = RetryPolicy()
    /// Block PATCHes in flight at once (a link with a long round trip stays busy), each
    /// on its own sender thread with
    /// its own 4 MiB buffer; as many items may be in flight. 1: one at a time, on the
    /// engine thread itself.
    public var blocksInFlight = 4

    public init(urlRenewMargin: Double = 60, retry: RetryPolicy = RetryPolicy(), blocksInFlight: Int = 4) {
        self.urlRenewMargin = urlRenewMargin; self.retry = retry; self.blocksInFlight = blocksInFlight
    }
}

/// Uploads due items by blocks: whole-file dedup, the server's plan of missing blocks
/// (block-level dedup and resume offsets in one answer), one PATCH per missing block read
/// once from the local block store, then the file record, which makes the content
/// visible on the server once every block is there and the list hashes to the content
/// hash. Docs/backup.md argues the kill points and the reading-once figure.
///
/// Several PATCHes (of one item or of several) may be in flight on the `SenderPool`; all
/// the rest (database, plans, records, outcomes) happens on the engine thread, one item
/// transition at a time, so each row follows the same state machine as with one sender.
/// Items sharing content or a block with one in flight wait for it (the second is then
/// linked, or sends only what the first did not).
///
/// Not thread-safe: one uploader belongs to the engine thread.
final class ItemUploader {
    let queue: BackupQueue
    let transport: BackupTransport
    let blobs: BackupBlobSource
    let configuration: UploaderConfiguration
    let clock: () -> Double
    let random: () -> Double
    /// Cheap check made on every progress tick, on any thread: false when stop or pause
    /// is requested.
    let shouldContinue: @Sendable () -> Bool
    /// Full policy evaluation, made between blocks.
    let currentHold: () -> BackupHold?
    /// Bytes put on the wire (for the rate) as they go.
    let onBytesSent: (Int64) -> Void
    private let pool: SenderPool
    private var transfers: [Transfer] = []

    /// A plan refused at record time this many times in one attempt (blocks acknowledged,
    /// then reported missing) is an integrity failure: the server does not keep what it
    /// acknowledges. One extra round covers a block collected between plan and record.
    static let maxRecordRounds = 2
    /// New plans in a row without a block completing (expired URLs, forgotten uploads,
    /// offsets moved) before the error counts as a transient failure with backoff.
    static let maxRenewals = 4

    init(queue: BackupQueue, transport: BackupTransport, blobs: BackupBlobSource, configuration: UploaderConfiguration,
         clock: @escaping () -> Double, random: @escaping () -> Double, shouldContinue: @escaping @Sendable () -> Bool,
         currentHold: @escaping () -> BackupHold?, onBytesSent: @escaping (Int64) -> Void) {
        self.queue = queue; self.transport = transport; self.blobs = blobs; self.configuration = configuration
        self.clock = clock; self.random = random; self.shouldContinue = shouldContinue
        self.currentHold = currentHold; self.onBytesSent = onBytesSent
        pool = SenderPool(width: configuration.blocksInFlight, transport: transport, blobs: blobs,
                          shouldContinue: shouldContinue)
    }

    /// How `run` ended.
    enum End: Equatable {
        /// Nothing (more) is due.
        case idle
        case held(BackupHold)
        case stopped
    }

    /// One item in flight: its plan, what is left to send, what is on the wire.
    private final class Transfer {
        let item: BackupItem
        var pending: [BlockUpload] = []
        var inFlight: [SenderPool.Job] = []
        /// Bytes of the content the server holds (the item's `bytes_sent`).
        var held: Int64 = 0
        var captureDate: String?
        var expiresAt: Double = .infinity
        var watchExpiry = false
        var renewals = 0
        var recordRounds = 0
        /// A renewable error (expired URL, forgotten upload, moved offset): re-plan once
        /// nothing of this item is in flight.
        var renewal: BackupTransportError?
        /// The first error that ends this attempt; the other blocks are cancelled.
        var failure: (any Error)?

        /// The blocks this item may send (zero blocks never are).
        let sendable: Set<SHA256Digest>

        init(_ item: BackupItem) {
            self.item = item
            captureDate = item.captureDate
            sendable = Self.sendableBlocks(of: item)
        }

        /// Content or a block another item must not send at the same time.
        func shares(with other: BackupItem) -> Bool {
            item.hash == other.hash || !sendable.isDisjoint(with: Self.sendableBlocks(of: other))
        }

        static func sendableBlocks(of item: BackupItem) -> Set<SHA256Digest> {
            var out = Set<SHA256Digest>()
            for (index, digest) in item.blocks.enumerated()
            where !Blocks.isZero(digest, length: Blocks.length(ofBlock: index, fileSize: item.size)) {
                out.insert(digest)
            }
            return out
        }
    }

    /// The path of the oldest item in flight, for the status.
    var currentPath: String? { transfers.first?.item.path }

    /// Uploads the items `next` yields (oldest commit first), several in flight, until it
    /// yields none and all are finished, or a hold or a stop applies (in-flight PATCHes
    /// are then cancelled; the server keeps their bytes). `report` receives each item's
    /// outcome once its state is written. Throws only database errors, after putting the
    /// items in flight back to pending.
    func run(next: () throws -> BackupItem?, report: (BackupItem, UploadOutcome) throws -> Void) throws -> End {
        var end: End?
        do {
            while true {
                if end == nil {
                    if !shouldContinue() { end = .stopped } else if let hold = currentHold() { end = .held(hold) }
                    if end != nil { for t in transfers { cancel(t) } }
                }
                if end == nil {
                    try admit(next: next, report: report)
                    dispatch()
                }
                if transfers.isEmpty { return end ?? .idle }
                let timeout = transfers.contains { !$0.inFlight.isEmpty } ? 0.1 : 0
                for finished in pool.collect(timeout: timeout) { try absorb(finished) }
                countProgress()
                try conclude(end: end, report: report)
            }
        } catch {
            // A database error: nothing more goes out; every item in flight back to pending.
            for t in transfers { cancel(t) }
            while pool.outstanding > 0 { _ = pool.collect(timeout: 1) }
            for t in transfers { try? queue.release(t.item.id) }
            transfers = []
            throw error
        }
    }

    /// One item through one attempt (tests; the engine uses `run`).
    func process(_ item: BackupItem) throws -> UploadOutcome {
        var given = false
        var outcome: UploadOutcome?
        let end = try run(next: { given ? nil : { given = true; return item }() }, report: { outcome = $1 })
        switch end {
        case .idle: return outcome ?? .superseded
        case .held(let hold): return outcome ?? .held(hold)
        case .stopped: return outcome ?? .stopped
        }
    }

    // MARK: - Admitting items

    /// Starts due items while the senders would otherwise run dry: only when no block of
    /// an item in flight waits for a sender, and at most one item per sender.
    private func admit(next: () throws -> BackupItem?, report: (BackupItem, UploadOutcome) throws -> Void) throws {
        while pool.hasRoom, transfers.count < pool.width, transfers.allSatisfy({ $0.pending.isEmpty }) {
            guard let item = try next() else { return }
            // The oldest due item shares content with one in flight: it waits for it.
            if transfers.contains(where: { $0.shares(with: item) }) { return }
            guard try queue.markUploading(item.id) else {
                try report(item, .superseded)
                continue
            }
            let t = Transfer(item)
            transfers.append(t)
            do {
                // A row whose block list does not name its content (queued by a version
                // before blocks and not migrated) would be refused by the server: say so.
                guard item.manifest.isConsistent else {
                    throw LocalBlobProblem(reason: "the queued block list (\(item.blocks.count) blocks) does not match the content hash \(item.hash.hex) of \(item.size) bytes")
                }
                // Content already backed up through another name: link, send nothing.
                if try queue.isHashDone(item.hash) {
                    try finish(t, try finishLinked(t), report: report)
                } else if try !plan(t) {
                    try finish(t, try finishLinked(t), report: report)
                } else if t.pending.isEmpty {
                    try record(t, report: report)
                }
            } catch {
                try finish(t, try outcome(of: error, for: t), report: report)
            }
            // Its blocks go out now, so the next item's plan is asked for while they travel.
            dispatch()
        }
    }

    /// Asks the server for this item's plan; false when the content is already there.
    private func plan(_ t: Transfer) throws -> Bool {
        guard case .blocks(let plan, let expiresAt) = try transport.createUpload(t.item.manifest) else { return false }
        t.pending = try Self.checked(plan, against: t.item)
        t.held = t.item.size - t.pending.reduce(0) { $0 + $1.length - $1.offset }
        t.expiresAt = expiresAt
        // `expiresAt` is the server's clock. Renew ahead of it only when our clock agrees
        // that the plan is fresh now; a device whose clock is off by more than the URLs'
        // lifetime relies on the server's "expired" answer instead of renewing in a loop.
        t.watchExpiry = expiresAt > clock() + configuration.urlRenewMargin
        t.renewal = nil
        try queue.saveProgress(t.item.id, bytesSent: t.held)
        return true
    }

    /// The plan's blocks in file order, each once, after checking that they are blocks of
    /// this content: a plan that names other blocks (or a zero block, which is never sent)
    /// is a server fault no retry will fix.
    static func checked(_ plan: [BlockUpload], against item: BackupItem) throws -> [BlockUpload] {
        var seen = Set<SHA256Digest>()
        var out: [BlockUpload] = []
        for block in plan.sorted(by: { $0.index < $1.index }) {
            let expectedLength = Int64(Blocks.length(ofBlock: block.index, fileSize: item.size))
            guard block.index >= 0, block.index < item.blocks.count, item.blocks[block.index] == block.hash,
                  block.length == expectedLength, block.offset >= 0, block.offset <= block.length,
                  !Blocks.isZero(block.hash, length: Int(block.length)) else {
                throw BackupTransportError(.permanent, "the server's upload plan names block \(block.index) (\(block.hash.hex), \(block.length) bytes at \(block.offset)), which is not a block of \(item.hash.hex) to send")
            }
            if block.offset < block.length, seen.insert(block.hash).inserted { out.append(block) }
        }
        return out
    }

    // MARK: - Blocks on the wire

    /// Hands waiting blocks to free senders, oldest item first. Policies are checked
    /// before each block, so a hold bites between blocks (and cancels what is in flight).
    private func dispatch() {
        for t in transfers where t.failure == nil && t.renewal == nil {
            while pool.hasRoom, let block = t.pending.first {
                if t.watchExpiry && clock() + configuration.urlRenewMargin >= t.expiresAt {
                    t.renewal = BackupTransportError(.expiredURL, "the upload URLs are about to expire")
                    break
                }
                t.pending.removeFirst()
                let job = SenderPool.Job(transfer: t.item.id, block: block, mtime: t.item.mtime,
                                         wantCaptureDate: t.captureDate == nil)
                t.inFlight.append(job)
                pool.submit(job) { [onBytesSent] sent in
                    let before = job.counted.exchange(sent, ordering: .relaxed)
                    if sent > before { onBytesSent(sent - before) }
                }
            }
        }
    }

    /// Takes in one finished PATCH (on the engine thread: the database is written here).
    private func absorb(_ finished: SenderPool.Finished) throws {
        guard let t = transfers.first(where: { $0.item.id == finished.job.transfer }) else { return }
        t.inFlight.removeAll { $0 === finished.job }
        switch finished.result {
        case .success(let sent):
            let block = finished.job.block
            t.held += block.length - block.offset
            t.renewals = 0
            try queue.saveProgress(t.item.id, bytesSent: t.held)
            if let date = sent.captureDate, t.captureDate == nil {
                try queue.saveCaptureDate(t.item.id, date)
                t.captureDate = date.value
            }
        case .failure(let error as BackupTransportError) where Self.renewsPlan(error):
            t.renewal = t.renewal ?? error
        case .failure(let error):
            if t.failure == nil {
                t.failure = error
                cancel(t)
            }
        }
    }

    /// Reports the bytes sent since the last look (pooled senders), for the rate.
    private func countProgress() {
        for t in transfers {
            for job in t.inFlight {
                let now = job.progress.load(ordering: .relaxed)
                let before = job.counted.exchange(now, ordering: .relaxed)
                if now > before { onBytesSent(now - before) }
            }
        }
    }

    private func cancel(_ t: Transfer) {
        t.pending = []
        for job in t.inFlight { job.cancelled.store(true, ordering: .relaxed) }
    }

    private static func renewsPlan(_ error: BackupTransportError) -> Bool {
        switch error.kind {
        case .expiredURL, .notFound, .offsetConflict: return true
        default: return false
        }
    }

    // MARK: - Concluding

    /// Moves on every item with nothing in flight: to its outcome, a new plan, or its record.
    private func conclude(end: End?, report: (BackupItem, UploadOutcome) throws -> Void) throws {
        for t in transfers where t.inFlight.isEmpty {
            do {
                if let failure = t.failure, !Self.isCancellation(failure) || end == nil {
                    try finish(t, try outcome(of: failure, for: t), report: report)
                } else if let end {
                    try queue.release(t.item.id)
                    switch end {
                    case .held(let hold): try finish(t, .held(hold), report: report)
                    case .stopped, .idle: try finish(t, .stopped, report: report)
                    }
                } else if let renewal = t.renewal {
                    // A fresh plan carries fresh URLs and the offsets the server holds now.
                    t.renewals += 1
                    guard t.renewals <= Self.maxRenewals else { throw renewal }
                    if try !plan(t) {
                        try finish(t, try finishLinked(t), report: report)
                    } else if t.pending.isEmpty {
                        try record(t, report: report)
                    }
                } else if t.pending.isEmpty {
                    try record(t, report: report)
                }
            } catch let error as DatabaseError {
                throw error
            } catch {
                try finish(t, try outcome(of: error, for: t), report: report)
            }
        }
    }

    /// Every block is on the server: the file record makes the content visible.
    private func record(_ t: Transfer, report: (BackupItem, UploadOutcome) throws -> Void) throws {
        if t.captureDate == nil { t.captureDate = try readCaptureDate(t.item).value }
        do {
            try transport.recordFile(backupRecord(t.item, captureDate: t.captureDate))
        } catch let error as BackupTransportError where error.kind == .missingBlocks {
            t.recordRounds += 1
            if t.recordRounds >= Self.maxRecordRounds {
                try finish(t, try integrityFailure(t.item, "the server acknowledged blocks it does not hold: \(error.message)"),
                           report: report)
                return
            }
            // Send what the server says it lacks, in this attempt, without a backoff.
            if try !plan(t) {
                try finish(t, try finishLinked(t), report: report)
            } else if t.pending.isEmpty {
                try record(t, report: report)
            }
            return
        }
        try queue.markDone(t.item.id, linked: false, recorded: true, now: clock())
        try finish(t, .sent, report: report)
    }

    private func finish(_ t: Transfer, _ outcome: UploadOutcome, report: (BackupItem, UploadOutcome) throws -> Void) throws {
        transfers.removeAll { $0 === t }
        try report(t.item, outcome)
    }

    private static func isCancellation(_ error: any Error) -> Bool {
        (error as? BackupTransportError)?.kind == .cancelled
    }

    /// Writes the state an attempt ended in, from the error that ended it.
    private func outcome(of error: any Error, for t: Transfer) throws -> UploadOutcome {
        switch error {
        case let error as BackupTransportError:
            return try settle(t.item, after: error)
        case let problem as LocalBlobProblem:
            try queue.markFailed(t.item.id, reason: problem.reason, now: clock())
            return .failed(reason: problem.reason)
        case let error as DatabaseError:
            throw error
        default:
            return try settle(t.item, after: BackupTransportError(.transient, "\(error)"))
        }
    }

    private func settle(_ item: BackupItem, after error: BackupTransportError) throws -> UploadOutcome {
        switch error.kind {
        case .cancelled:
            try queue.release(item.id)
            return .stopped
        case .permanent:
            try queue.markFailed(item.id, reason: "the server refused the upload: \(error.message)", now: clock())
            return .failed(reason: "the server refused the upload: \(error.message)")
        case .checksumMismatch:
            return try integrityFailure(item, "the server computed another checksum: \(error.message)")
        case .transient, .expiredURL, .offsetConflict, .notFound, .missingBlocks:
            let at = clock() + configuration.retry.delay(afterAttempt: item.attempts, random: random())
            try queue.scheduleRetry(item.id, at: at, error: error.message)
            return .retry(at: at, error: error.message)
        case .serverFull:
            let at = clock() + configuration.retry.delay(afterAttempt: item.attempts, random: random())
            try queue.scheduleRetry(item.id, at: at, error: error.message)
            return .serverFull(at: at, message: error.message)
        }
    }

    /// The server refused or lost bytes that were intact here: counted apart from transient
    /// errors, and after `maxIntegrityFailures` the item fails (retrying will not heal a
    /// broken proxy or disk). The server drops a block that fails its check, so the next
    /// attempt starts that block afresh.
    private func integrityFailure(_ item: BackupItem, _ message: String) throws -> UploadOutcome {
        if item.integrityFailures + 1 >= configuration.retry.maxIntegrityFailures {
            let reason = "\(message) (\(item.integrityFailures + 1) times; not retrying)"
            try queue.markFailed(item.id, reason: reason, now: clock())
            return .failed(reason: reason)
        }
        let at = clock() + configuration.retry.delay(afterAttempt: item.attempts, random: random())
        try queue.scheduleRetry(item.id, at: at, error: message, integrityFailure: true)
        return .retry(at: at, error: message)
    }

    private func backupRecord(_ item: BackupItem, captureDate: String?) -> BackupRecord {
        BackupRecord(path: item.path, hash: item.hash, size: item.size, blocks: item.blocks, captureDate: captureDate,
                   mtime: item.mtime, changeSequence: item.changeSequence)
    }

    /// Done without sending. The capture date still comes from the first block's first
    /// bytes when that block is here (one read of at most 128 KiB), else from the mtime.
    private func finishLinked(_ t: Transfer) throws -> UploadOutcome {
        if t.captureDate == nil { t.captureDate = try readCaptureDate(t.item).value }
        // The content is on the server: the item is done whatever happens to the record,
        // which the sync task retries when this call fails.
        let recorded = (try? transport.recordFile(backupRecord(t.item, captureDate: t.captureDate))) != nil
        try queue.markDone(t.item.id, linked: true, recorded: recorded, now: clock())
        return .linked
    }

    /// Reads the capture date from the start of block 0 (when it was not sent in this
    /// attempt: already on the server, or resumed past its start), saves and returns it.
    private func readCaptureDate(_ item: BackupItem) throws -> CaptureDate {
        var date = CaptureDate(value: CaptureDate.utcString(item.mtime), source: .mtime)
        if let first = item.blocks.first {
            let length = Blocks.length(ofBlock: 0, fileSize: item.size)
            if !Blocks.isZero(first, length: length), let fd = try? blobs.openBlock(first) {
                defer { FileIO.close(fd) }
                let want = min(length, CaptureDate.prefixLength)
                let prefix = UnsafeMutableRawBufferPointer.allocate(byteCount: want, alignment: 16)
                defer { prefix.deallocate() }
                if let n = try? FileIO.pread(fd, into: prefix, at: 0) {
                    date = CaptureDate.from(prefix: UnsafeRawBufferPointer(rebasing: prefix[0..<n]), mtime: item.mtime)
                }
            }
        }
        try queue.saveCaptureDate(item.id, date)
        return date
    }
}
