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

    public init(urlRenewMargin: Double = 60, retry: RetryPolicy = RetryPolicy()) {
        self.urlRenewMargin = urlRenewMargin; self.retry = retry
    }
}

/// Uploads one item at a time, by blocks: whole-file dedup, the server's plan of missing
/// blocks (block-level dedup and resume offsets in one answer), one PATCH per missing
/// block read once from the local block store, then the file record, which makes the
/// content visible on the server once every block is there and the list hashes to the
/// content hash. Docs/backup.md argues the kill points and the reading-once figure.
///
/// Not thread-safe: one uploader belongs to the engine thread.
final class ItemUploader {
    let queue: BackupQueue
    let transport: BackupTransport
    let blobs: BackupBlobSource
    let configuration: UploaderConfiguration
    let clock: () -> Double
    let random: () -> Double
    /// Cheap check made on every progress tick: false when stop or pause is requested.
    let shouldContinue: () -> Bool
    /// Full policy evaluation, made between blocks.
    let currentHold: () -> BackupHold?
    /// Bytes put on the wire (for the rate) as they go.
    let onBytesSent: (Int64) -> Void
    private let sender: BlockSender

    /// A plan refused at record time this many times in one attempt (blocks acknowledged,
    /// then reported missing) is an integrity failure: the server does not keep what it
    /// acknowledges. One extra round covers a block collected between plan and record.
    static let maxRecordRounds = 2

    init(queue: BackupQueue, transport: BackupTransport, blobs: BackupBlobSource, configuration: UploaderConfiguration,
         clock: @escaping () -> Double, random: @escaping () -> Double, shouldContinue: @escaping () -> Bool,
         currentHold: @escaping () -> BackupHold?, onBytesSent: @escaping (Int64) -> Void) {
        self.queue = queue; self.transport = transport; self.blobs = blobs; self.configuration = configuration
        self.clock = clock; self.random = random; self.shouldContinue = shouldContinue
        self.currentHold = currentHold; self.onBytesSent = onBytesSent
        sender = BlockSender(transport: transport, blobs: blobs)
    }

    /// Takes a pending item through one attempt and writes its resulting state.
    /// Throws only database errors (the engine backs off and tries again).
    func process(_ item: BackupItem) throws -> UploadOutcome {
        guard try queue.markUploading(item.id) else { return .superseded }
        do {
            return try attempt(item)
        } catch let error as BackupTransportError {
            return try settle(item, after: error)
        } catch let problem as LocalBlobProblem {
            try queue.markFailed(item.id, reason: problem.reason, now: clock())
            return .failed(reason: problem.reason)
        } catch let hold as HeldBetweenBlocks {
            try queue.release(item.id)
            return .held(hold.hold)
        } catch let error as DatabaseError {
            try? queue.release(item.id)
            throw error
        } catch {
            return try settle(item, after: BackupTransportError(.transient, "\(error)"))
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

    // MARK: - One attempt

    private func attempt(_ item: BackupItem) throws -> UploadOutcome {
        // A row whose block list does not name its content (queued by a version before
        // blocks and not migrated) would be refused by the server: say so here.
        guard item.manifest.isConsistent else {
            throw LocalBlobProblem(reason: "the queued block list (\(item.blocks.count) blocks) does not match the content hash \(item.hash.hex) of \(item.size) bytes")
        }
        // Content already backed up through another name: link, send nothing.
        if try queue.isHashDone(item.hash) { return try finishLinked(item) }

        var captureDate = item.captureDate
        var recordRounds = 0
        var renewals = 0
        while true {
            guard case .blocks(let plan, let expiresAt) = try transport.createUpload(item.manifest) else {
                return try finishLinked(item)
            }
            let blocks = try Self.checked(plan, against: item)
            var held = item.size - blocks.reduce(0) { $0 + $1.length - $1.offset }
            try queue.saveProgress(item.id, bytesSent: held)
            // `expiresAt` is the server's clock. Renew ahead of it only when our clock
            // agrees that the plan is fresh now; a device whose clock is off by more than
            // the URLs' lifetime relies on the server's "expired" answer instead of
            // renewing in a loop.
            let watchExpiry = expiresAt > clock() + configuration.urlRenewMargin
            do {
                for block in blocks {
                    guard shouldContinue() else { throw BackupTransportError(.cancelled, "stopped") }
                    if let hold = currentHold() { throw HeldBetweenBlocks(hold: hold) }
                    if watchExpiry && clock() + configuration.urlRenewMargin >= expiresAt {
                        throw BackupTransportError(.expiredURL, "the upload URLs are about to expire")
                    }
                    var reported: Int64 = 0
                    let sent = try sender.send(block, mtime: item.mtime, wantCaptureDate: captureDate == nil) { now in
                        if now > reported { onBytesSent(now - reported); reported = now }
                        return shouldContinue()
                    }
                    if let date = sent.captureDate {
                        try queue.saveCaptureDate(item.id, date)
                        captureDate = date.value
                    }
                    held += block.length - block.offset
                    try queue.saveProgress(item.id, bytesSent: held)
                    renewals = 0
                }
            } catch let error as BackupTransportError where Self.renewsPlan(error) && renewals < 4 {
                // Expired URLs, an upload the server forgot, another offset than it told us:
                // a fresh plan carries fresh URLs and the offsets the server holds now.
                renewals += 1
                continue
            }
            if captureDate == nil { captureDate = try readCaptureDate(item).value }
            do {
                try transport.recordFile(record(item, captureDate: captureDate))
            } catch let error as BackupTransportError where error.kind == .missingBlocks {
                recordRounds += 1
                if recordRounds >= Self.maxRecordRounds {
                    return try integrityFailure(item, "the server acknowledged blocks it does not hold: \(error.message)")
                }
                continue
            }
            try queue.markDone(item.id, linked: false, recorded: true, now: clock())
            return .sent
        }
    }

    private static func renewsPlan(_ error: BackupTransportError) -> Bool {
        switch error.kind {
        case .expiredURL, .notFound, .offsetConflict: return true
        default: return false
        }
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

    private func record(_ item: BackupItem, captureDate: String?) -> FileRecord {
        FileRecord(path: item.path, hash: item.hash, size: item.size, blocks: item.blocks, captureDate: captureDate,
                   mtime: item.mtime, changeSequence: item.changeSequence)
    }

    // MARK: - Finishing

    /// Done without sending. The capture date still comes from the first block's first
    /// bytes when that block is here (one read of at most 128 KiB), else from the mtime.
    private func finishLinked(_ item: BackupItem) throws -> UploadOutcome {
        var captureDate = item.captureDate
        if captureDate == nil { captureDate = try readCaptureDate(item).value }
        // The content is on the server: the item is done whatever happens to the record,
        // which the sync task retries when this call fails.
        let recorded = (try? transport.recordFile(record(item, captureDate: captureDate))) != nil
        try queue.markDone(item.id, linked: true, recorded: recorded, now: clock())
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

/// A policy started holding between two blocks.
struct HeldBetweenBlocks: Error { let hold: BackupHold }
