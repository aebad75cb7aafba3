import Crypto
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// How one item's turn ended.
public enum UploadOutcome: Sendable, Equatable {
    /// Bytes were sent and the server confirmed the blob under its hash.
    case sent
    /// The server (or an earlier item) already had the content: nothing was sent.
    case linked
    case failed(reason: String)
    /// A transient error: the item is pending again, due at this time.
    case retry(at: Double, error: String)
    /// A policy held it back between chunks: pending again, due now.
    case held(BackupHold)
    /// Stop was requested (unmount): pending again, due now; the server keeps its offset.
    case stopped
    /// The row left `pending` before its turn (a newer version replaced it): not touched.
    case superseded
}

public struct UploaderConfiguration: Sendable {
    /// Bytes per tus PATCH. 8 MiB: large enough that per-request overhead is noise at
    /// gigabit speeds, small enough that a kill re-sends little and pause reacts quickly.
    public var chunkSize = 8 << 20
    /// A stored URL expiring sooner than this is renewed before use.
    public var urlRenewMargin: Double = 60
    public var retry = RetryPolicy()

    public init(chunkSize: Int = 8 << 20, urlRenewMargin: Double = 60, retry: RetryPolicy = RetryPolicy()) {
        self.chunkSize = chunkSize; self.urlRenewMargin = urlRenewMargin; self.retry = retry
    }
}

/// Uploads one item at a time: dedup, presigned URL, resume from the server's offset,
/// chunked PATCHes read once from the blob, verification, file record, final state.
///
/// Reading once: each chunk is read into one reusable buffer with `pread`, fed to the
/// whole-file hasher and to the chunk hasher, and handed to the transport, so a fresh
/// upload reads each byte exactly once (1.0 bytes read per byte sent, constant memory).
/// The whole-file digest is compared BEFORE the last chunk is sent: a corrupt local blob
/// never completes an upload, so the server can never acknowledge wrong bytes (it checks
/// the full hash at completion too). A resumed upload re-reads the prefix the server
/// already has to rebuild the hash: that read costs disk, never network.
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
    /// Full policy evaluation, made between chunks.
    let currentHold: () -> BackupHold?
    /// Bytes put on the wire (for the rate) as they go.
    let onBytesSent: (Int64) -> Void
    private let buffer: UnsafeMutableRawBufferPointer

    init(queue: BackupQueue, transport: BackupTransport, blobs: BackupBlobSource, configuration: UploaderConfiguration,
         clock: @escaping () -> Double, random: @escaping () -> Double, shouldContinue: @escaping () -> Bool,
         currentHold: @escaping () -> BackupHold?, onBytesSent: @escaping (Int64) -> Void) {
        self.queue = queue; self.transport = transport; self.blobs = blobs; self.configuration = configuration
        self.clock = clock; self.random = random; self.shouldContinue = shouldContinue
        self.currentHold = currentHold; self.onBytesSent = onBytesSent
        buffer = .allocate(byteCount: max(configuration.chunkSize, CaptureDate.prefixLength), alignment: 64)
    }

    deinit { buffer.deallocate() }

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
        } catch let hold as HeldBetweenChunks {
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
        case .transient, .expiredURL, .offsetConflict, .notFound:
            let at = clock() + configuration.retry.delay(afterAttempt: item.attempts, random: random())
            try queue.scheduleRetry(item.id, at: at, error: error.message)
            return .retry(at: at, error: error.message)
        }
    }

    private func integrityFailure(_ item: BackupItem, _ message: String) throws -> UploadOutcome {
        if item.integrityFailures + 1 >= configuration.retry.maxIntegrityFailures {
            let reason = "\(message) (\(item.integrityFailures + 1) times; not retrying)"
            try queue.markFailed(item.id, reason: reason, now: clock())
            return .failed(reason: reason)
        }
        // A fresh upload next time: whatever the server holds for this one is suspect.
        try queue.saveUpload(item.id, url: nil, expiresAt: nil)
        let at = clock() + configuration.retry.delay(afterAttempt: item.attempts, random: random())
        try queue.scheduleRetry(item.id, at: at, error: message, integrityFailure: true)
        return .retry(at: at, error: message)
    }

    // MARK: - One attempt

    private func attempt(_ item: BackupItem) throws -> UploadOutcome {
        // Content already backed up through another name: link, send nothing.
        if try queue.isHashDone(item.hash) { return try finishLinked(item) }

        let fd = try openBlob(item)
        defer { FileIO.close(fd) }

        var session = try openSession(item)
        var restarts = 0
        while true {
            guard case .upload(let url, let offset) = session else { return try finishLinked(item, fd: fd) }
            do {
                try transfer(item, fd: fd, url: url, from: offset)
                break
            } catch let error as BackupTransportError where restarts < 4 {
                restarts += 1
                switch error.kind {
                case .offsetConflict(let serverOffset):
                    session = .upload(url: url, offset: serverOffset)
                case .expiredURL, .notFound:
                    session = try createSession(item)
                default:
                    throw error
                }
            }
        }

        // Done only when the server has the blob under the right hash.
        guard try transport.presentHashes([item.hash]).contains(item.hash) else {
            return try integrityFailure(item, "the server acknowledged the upload but does not hold \(item.hash.hex)")
        }
        try recordAndFinish(item, linked: false)
        return .sent
    }

    private enum Session { case present, upload(url: String, offset: Int64) }

    /// The stored URL with the server's offset (HEAD), or a new URL when there is none,
    /// it is about to expire, or the server no longer knows it.
    private func openSession(_ item: BackupItem) throws -> Session {
        if let url = item.uploadURL, let expires = item.urlExpiresAt, expires > clock() + configuration.urlRenewMargin {
            do {
                return .upload(url: url, offset: try transport.uploadOffset(url: url))
            } catch let error as BackupTransportError where error.kind == .expiredURL || error.kind == .notFound {
                // Renewed below.
            }
        }
        return try createSession(item)
    }

    private func createSession(_ item: BackupItem) throws -> Session {
        switch try transport.createUpload(hash: item.hash, size: item.size) {
        case .present:
            return .present
        case .upload(let url, let offset, let expiresAt):
            try queue.saveUpload(item.id, url: url, expiresAt: expiresAt)
            return .upload(url: url, offset: offset)
        }
    }

    private func openBlob(_ item: BackupItem) throws -> Int32 {
        let fd: Int32
        do {
            fd = try blobs.openBlob(item.hash)
        } catch let error as Errno where error == .noSuchFileOrDirectory {
            throw LocalBlobProblem(reason: "the local copy is missing (blob \(item.hash.hex))")
        } catch {
            throw LocalBlobProblem(reason: "the local copy cannot be opened: \(error)")
        }
        let size = (try? FileIO.status(fd)).map { Int64($0.st_size) }
        guard size == item.size else {
            FileIO.close(fd)
            throw LocalBlobProblem(reason: "the local copy has \(size.map(String.init) ?? "unknown") bytes, expected \(item.size)")
        }
        return fd
    }

    /// Sends `[offset, size)` in chunks. Rebuilds the whole-file hash over `[0, offset)`
    /// first, and refuses to send the last chunk unless the whole file hashes to its name.
    private func transfer(_ item: BackupItem, fd: Int32, url: String, from offset: Int64) throws {
        guard offset >= 0, offset <= item.size else {
            throw BackupTransportError(.notFound, "the server reports offset \(offset) for a \(item.size)-byte upload")
        }
        let hasher = SHA256Hasher()
        var at: Int64 = 0
        // The prefix the server already holds: read for the hash only.
        while at < offset {
            let n = try readChunk(item, fd: fd, at: at, limit: offset - at)
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            at += Int64(n)
        }
        if at == item.size {
            // Everything reached the server before (a kill after the last PATCH).
            try verify(item, hasher.finish())
            return
        }
        while at < item.size {
            guard shouldContinue() else { throw BackupTransportError(.cancelled, "stopped") }
            if let hold = currentHold() { throw HeldBetweenChunks(hold: hold) }
            let n = try readChunk(item, fd: fd, at: at, limit: item.size - at)
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            hasher.update(chunk)
            var chunkDigest: SHA256Digest?
            if at + Int64(n) == item.size {
                let whole = hasher.finish()
                try verify(item, whole)
                // A file sent in one chunk (most photos): the chunk checksum is the file's
                // hash, already computed; hashing the same bytes again would double the CPU.
                if at == 0 { chunkDigest = whole }
            }
            let chunkSHA256 = chunkDigest ?? {
                let chunkHasher = SHA256Hasher()
                chunkHasher.update(chunk)
                return chunkHasher.finish()
            }()
            var reported: Int64 = 0
            let newOffset = try transport.patch(url: url, offset: at, chunk: chunk, chunkSHA256: chunkSHA256) { sent in
                if sent > reported { onBytesSent(sent - reported); reported = sent }
                return shouldContinue()
            }
            guard newOffset == at + Int64(n) else { throw BackupTransportError(.offsetConflict(serverOffset: newOffset), "short PATCH") }
            at = newOffset
            try queue.saveProgress(item.id, bytesSent: at)
        }
    }

    /// Reads up to one chunk at `at`; the first chunk also yields the capture date.
    private func readChunk(_ item: BackupItem, fd: Int32, at: Int64, limit: Int64) throws -> Int {
        let want = Int(min(Int64(configuration.chunkSize), limit))
        let n: Int
        do {
            n = try FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: at)
        } catch {
            throw LocalBlobProblem(reason: "the local copy cannot be read: \(error)")
        }
        guard n == want else { throw LocalBlobProblem(reason: "the local copy ends at \(at + Int64(n)) bytes, expected \(item.size)") }
        if at == 0 {
            let prefix = UnsafeRawBufferPointer(rebasing: buffer[0..<min(n, CaptureDate.prefixLength)])
            try queue.saveCaptureDate(item.id, CaptureDate.from(prefix: prefix, mtime: item.mtime))
        }
        return n
    }

    private func verify(_ item: BackupItem, _ digest: SHA256Digest) throws {
        guard digest == item.hash else {
            throw LocalBlobProblem(reason: "the local copy is corrupt: it hashes to \(digest.hex), not \(item.hash.hex)")
        }
    }

    // MARK: - Finishing

    /// Done without sending. The capture date still comes from the blob's first bytes
    /// when the blob is here (one read of at most 128 KiB), else from the mtime.
    private func finishLinked(_ item: BackupItem, fd: Int32? = nil) throws -> UploadOutcome {
        if item.captureDate == nil {
            let ownFd = fd == nil ? try? blobs.openBlob(item.hash) : nil
            defer { if let ownFd { FileIO.close(ownFd) } }
            var date = CaptureDate(value: CaptureDate.utcString(item.mtime), source: .mtime)
            if let readFd = fd ?? ownFd {
                let want = min(Int(item.size), CaptureDate.prefixLength)
                let slice = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
                if let n = try? FileIO.pread(readFd, into: slice, at: 0) {
                    date = CaptureDate.from(prefix: UnsafeRawBufferPointer(rebasing: buffer[0..<n]), mtime: item.mtime)
                }
            }
            try queue.saveCaptureDate(item.id, date)
        }
        try recordAndFinish(item, linked: true)
        return .linked
    }

    private func recordAndFinish(_ item: BackupItem, linked: Bool) throws {
        let captureDate = try queue.item(id: item.id)?.captureDate
        let record = FileRecord(path: item.path, hash: item.hash, size: item.size, captureDate: captureDate,
                                mtime: item.mtime, changeSequence: item.changeSequence)
        // The blob is on the server: the item is done whatever happens to the record,
        // which is retried by the sync task when this call fails.
        let recorded = (try? transport.recordFile(record)) != nil
        try queue.markDone(item.id, linked: linked, recorded: recorded, now: clock())
    }
}

/// The local blob cannot be sent as it is: the item fails with this reason.
struct LocalBlobProblem: Error { let reason: String }

/// A policy started holding between two chunks.
struct HeldBetweenChunks: Error { let hold: BackupHold }
