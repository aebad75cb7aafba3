import Crypto

/// What the uploader needs from the workspace server. The lead maps the libcurl client
/// onto it; tests use `InMemoryTransport`. Every call blocks its calling thread (the
/// engine's own thread), and may throw `BackupTransportError`; any other error thrown
/// is treated as transient.
public protocol BackupTransport: Sendable {
    /// The subset of `hashes` the server already holds as complete blobs (batch dedup).
    func presentHashes(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest>

    /// Starts (or finds) the resumable upload of a blob: `.present` when the server
    /// already has it (link, send nothing), else a presigned tus URL with its offset.
    /// A zero-length blob is complete at creation (tus): the answer is `.present`.
    func createUpload(hash: SHA256Digest, size: Int64) throws -> UploadTicket

    /// The offset the server holds for an upload (tus HEAD `Upload-Offset`).
    func uploadOffset(url: String) throws -> Int64

    /// Sends one chunk at `offset` (tus PATCH with `Upload-Checksum: sha256 <chunkSHA256>`)
    /// and returns the server's new offset. `progress` is called with the bytes of this
    /// chunk sent so far; returning false cancels the request (throw `.cancelled`).
    /// The chunk is handed over as bytes the uploader has already read and hashed, so the
    /// file is read exactly once (see Docs/backup.md, "Reading once").
    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64

    /// Records a file of this device (its path, content and dates) against a stored blob.
    /// Idempotent by `changeSequence`.
    func recordFile(_ record: FileRecord) throws

    /// This device's backup watermark as the server knows it; nil when it has none.
    func watermark() throws -> BackupWatermark?
    func setWatermark(_ watermark: BackupWatermark) throws
}

/// The server's answer to `createUpload`.
public enum UploadTicket: Sendable, Equatable {
    case present
    case upload(url: String, offset: Int64, expiresAt: Double)
}

/// One file record pushed to the server once its blob is there.
public struct FileRecord: Sendable, Equatable {
    public var path: String
    public var hash: SHA256Digest
    public var size: Int64
    /// EXIF DateTimeOriginal as "YYYY-MM-DDTHH:MM:SS" (camera local time), if any.
    public var captureDate: String?
    public var mtime: Int64
    public var changeSequence: Int64

    public init(path: String, hash: SHA256Digest, size: Int64, captureDate: String?, mtime: Int64, changeSequence: Int64) {
        self.path = path; self.hash = hash; self.size = size
        self.captureDate = captureDate; self.mtime = mtime; self.changeSequence = changeSequence
    }
}

/// The backup cursor and the newest capture date below it.
public struct BackupWatermark: Sendable, Equatable, Codable {
    public var sequence: Int64
    public var newestCaptureDate: String?
    public init(sequence: Int64, newestCaptureDate: String?) {
        self.sequence = sequence; self.newestCaptureDate = newestCaptureDate
    }
}

/// A failed transport call, classified for the queue.
public struct BackupTransportError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Refused, timed out, 5xx, too slow, garbage answer: retry later with backoff.
        case transient
        /// The presigned URL expired: renew it (createUpload) and go on, no backoff.
        case expiredURL
        /// The server holds a different offset than the PATCH claimed: continue from it.
        case offsetConflict(serverOffset: Int64)
        /// The upload is unknown to the server (expired and collected): start a new one.
        case notFound
        /// The server computed another checksum for a chunk or for the whole blob.
        case checksumMismatch
        /// The request was cancelled by the progress callback (stop or pause).
        case cancelled
        /// Refused for good (401/403 after renewal, 413, 4xx): the item fails.
        case permanent
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) { self.kind = kind; self.message = message }

    public var isTransient: Bool {
        switch kind {
        case .transient, .expiredURL, .offsetConflict, .notFound, .cancelled: return true
        case .checksumMismatch, .permanent: return false
        }
    }

    public var description: String { message }
}
