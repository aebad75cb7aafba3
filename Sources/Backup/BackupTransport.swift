import Crypto

/// What the uploader needs from the workspace server. The command line maps the libcurl
/// client onto it (`ClientTransport`); the tests use a server in memory. Every call blocks its calling thread, and may
/// throw `BackupTransportError`; any other error thrown is treated as transient.
///
/// Content travels in blocks (Crypto's `Blocks`): the server is asked which contents it
/// has (whole-file dedup), then which blocks of one content it lacks (block-level dedup,
/// with the offset it holds for each), each missing block is a resumable tus upload of
/// at most 4 MiB (or, from a server keeping blocks in an object store, one presigned
/// PUT of the whole block that the server then verifies), and the file record makes the content visible once every block is
/// there and the block list hashes to the content hash.
public protocol BackupTransport: Sendable {
    /// The subset of `hashes` (content hashes) the server holds as verified contents.
    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest>

    /// Announces a content: `.present` when the server has it (link, send nothing), else
    /// the non-zero blocks it lacks, each with a presigned tus URL and the offset it holds.
    /// An empty list is valid: every block is there, record the file.
    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan

    /// The offset the server holds for a block upload (tus HEAD `Upload-Offset`).
    func uploadOffset(url: String) throws -> Int64

    /// Sends bytes of one block at `offset` (tus PATCH with `Upload-Checksum: sha256
    /// <chunkSHA256>`) and returns the server's new offset. `progress` is called with the
    /// bytes of this chunk sent so far; returning false cancels the request (throw
    /// `.cancelled`). The server checks the whole block against its name at its last byte.
    /// The chunk is bytes the uploader has already read (see Docs/backup.md, "Reading once").
    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64

    /// Sends one whole block to an object store with its presigned PUT (`block.kind` is
    /// `.s3`), then has the server verify it; after this returns the block is stored and
    /// recorded. An expired URL throws `.expiredURL`; bytes the store or the server find
    /// not to be the block throw `.checksumMismatch`.
    func put(_ block: BlockUpload, chunk: UnsafeRawBufferPointer, progress: (Int64) -> Bool) throws

    /// Records a file of this device. When the content is not yet present the server checks
    /// the record's block list against its hash and that every non-zero block is stored,
    /// then makes the content and the record visible together; a block missing throws
    /// `.missingBlocks`. Idempotent by `changeSequence`.
    func recordFile(_ record: BackupRecord) throws

    /// This device's backup watermark as the server knows it; nil when it has none.
    func watermark() throws -> BackupWatermark?
    func setWatermark(_ watermark: BackupWatermark) throws
}

/// A content as the server learns it: its hash, size and block list (zero blocks included).
public struct ContentManifest: Sendable, Equatable {
    public var content: SHA256Digest
    public var size: Int64
    public var blocks: [SHA256Digest]

    public init(content: SHA256Digest, size: Int64, blocks: [SHA256Digest]) {
        self.content = content; self.size = size; self.blocks = blocks
    }

    /// True when the block list is one this size has and hashes to `content`: what the
    /// server checks first. Costs one SHA-256 over 32 bytes per block.
    public var isConsistent: Bool {
        blocks.count == Blocks.count(forSize: size) && ContentHash.of(blocks: blocks) == content
    }
}

/// One block the server lacks: `index` in the file, its digest and length, where to send
/// it and how much of it the server already holds.
public struct BlockUpload: Sendable, Equatable {
    public var index: Int
    public var hash: SHA256Digest
    public var length: Int64
    public var url: String
    public var offset: Int64
    public var kind: Kind

    /// How the block travels: tus PATCHes to the server, or one presigned PUT to the
    /// server's object store with these (signed) headers.
    public enum Kind: Sendable, Equatable {
        case tus
        case s3(headers: [String])
    }

    public init(index: Int, hash: SHA256Digest, length: Int64, url: String, offset: Int64, kind: Kind = .tus) {
        self.index = index; self.hash = hash; self.length = length; self.url = url; self.offset = offset; self.kind = kind
    }
}

extension BackupTransport {
    /// Transports that only ever plan tus uploads (the in-memory ones of tests) never get an S3 block.
    public func put(_ block: BlockUpload, chunk: UnsafeRawBufferPointer, progress: (Int64) -> Bool) throws {
        throw BackupTransportError(.permanent, "this transport plans tus uploads only; it cannot send block \(block.index) to an object store")
    }
}

/// The server's answer to `createUpload`.
public enum UploadPlan: Sendable, Equatable {
    /// The content is there already: link, send nothing.
    case present
    /// Send these blocks (possibly none), then record the file; the URLs expire at `expiresAt`.
    case blocks([BlockUpload], expiresAt: Double)
}

/// One backed-up version of a camera-roll file, as the engine records it on the server once
/// its content is there (or to make it so). The client turns it into the wire's `FileRecord`
/// (Protocol), which carries the hashes as hex and the server's own fields.
public struct BackupRecord: Sendable, Equatable {
    public var path: String
    /// The content hash (Crypto's `ContentHash`), not a SHA-256 of the bytes.
    public var hash: SHA256Digest
    public var size: Int64
    /// The block list the content hash is computed from (zero blocks included).
    public var blocks: [SHA256Digest]
    /// EXIF DateTimeOriginal as "YYYY-MM-DDTHH:MM:SS" (camera local time), if any.
    public var captureDate: String?
    public var mtime: Int64
    public var changeSequence: Int64

    public init(path: String, hash: SHA256Digest, size: Int64, blocks: [SHA256Digest], captureDate: String?,
                mtime: Int64, changeSequence: Int64) {
        self.path = path; self.hash = hash; self.size = size; self.blocks = blocks
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
        /// The server computed another checksum for a chunk or for the whole block.
        case checksumMismatch
        /// The server refused a file record because blocks of its content are missing
        /// (409 `missing_blocks`): ask `createUpload` again and send them, no backoff.
        case missingBlocks
        /// The request was cancelled by the progress callback (stop or pause).
        case cancelled
        /// 507: the workspace is at its quota. The item waits, retried with backoff, and
        /// goes on by itself once the server has room again; it never fails for it.
        case serverFull
        /// Refused for good (401/403 after renewal, 413, 4xx): the item fails.
        case permanent
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) { self.kind = kind; self.message = message }

    public var isTransient: Bool {
        switch kind {
        case .transient, .expiredURL, .offsetConflict, .notFound, .missingBlocks, .cancelled, .serverFull: return true
        case .checksumMismatch, .permanent: return false
        }
    }

    public var description: String { message }
}
