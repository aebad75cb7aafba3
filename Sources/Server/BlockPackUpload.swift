import Crypto
import Protocol
import Storage

/// `POST /v1/blocks`: a block pack (`BlockPack`, at most `API.maxPackBody`) stored with
/// one commit. Each record is checked as it arrives (its length, not a zero block, its
/// bytes hashed and compared with its digest at its last byte) and handed to the store's
/// `PackStaging`; when the body is whole, the staging stores what the workspace lacks,
/// durably, and records it in one transaction (BlockPackStaging.swift). A pack is stored
/// whole or not at all: a bad record, a size conflict or a body cut short leaves nothing
/// of it behind (blocks another request stored meanwhile stay, of course).
enum BlockPackUpload {
    static func start(_ request: HTTPRequest, context: ServerContext) -> Route {
        guard request.header("Transfer-Encoding") == nil, let length = request.contentLength else {
            return .respond(.error(411, "length_required", "a block pack needs Content-Length (at most \(API.maxPackBody) bytes); send it as one body of known length, not chunked",
                                   field: "Content-Length"))
        }
        guard length <= Int64(API.maxPackBody) else {
            return .respond(.error(413, "body_too_large", "a block pack has at most \(API.maxPackBody) bytes (16 MiB), this one \(length): split the blocks over several packs",
                                   field: "Content-Length"))
        }
        let type = request.header("Content-Type")?.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first
        guard type?.trimmingSpaces.lowercased() == BlockPack.mediaType else {
            return .respond(.error(415, "unsupported_media_type", "a block pack must have 'Content-Type: \(BlockPack.mediaType)'", field: "Content-Type"))
        }
        do {
            // The whole body, headers included, against the quota: what it may add at most.
            try context.checkQuota(adding: length)
        } catch {
            return .respond(ServerContext.failure(error))
        }
        return .read(PackBody(context: context, staging: context.blocks.packStaging(context: context)))
    }
}

/// One record of a pack whose bytes arrived whole and hash to its digest (or, when the
/// staging dropped them, whose block the store already had).
struct PackRecord {
    let index: Int
    let digest: SHA256Digest
    let length: Int
}

/// Where a pack's records go while its body arrives, and how they are stored once it is
/// whole: the store's (`BlockStore.packStaging`, BlockPackStaging.swift). `begin`, `write`
/// and `end` run on the connection's thread (they must not wait on the network);
/// `commit` on a worker. `discard` may follow anything and is called at most once more
/// than needed (it is idempotent).
protocol PackStaging: AnyObject {
    /// A record begins (its length and zero-ness checked): false when its bytes are to
    /// be dropped unread because the store holds the block already (checked at commit).
    func begin(_ record: PackRecord) throws -> Bool
    /// Bytes of the current record, in order (not called for a dropped one).
    func write(_ bytes: UnsafeRawBufferPointer) throws
    /// The current record's bytes all came and hash to its digest.
    func end() throws
    /// Stores the staged blocks the workspace lacks and answers 200 `BlockPackResponse`,
    /// or a refusal with nothing stored.
    func commit() -> HTTPResponse
    /// Drops everything staged.
    func discard()
    /// The most bytes it holds in memory (the shared budget reserves them).
    var memoryBound: Int { get }
}

/// Reads a pack's body record by record into its staging, hashing each block on the way.
final class PackBody: RequestBody, BufferedInMemory {
    private let context: ServerContext
    private let staging: any PackStaging
    private var decoder = BlockPackDecoder()
    private var current: (record: PackRecord, hasher: SHA256Hasher?)?
    private var failure: HTTPResponse?
    /// The record whose bytes did not hash to its digest.
    private var mismatch: PackRecord?

    init(context: ServerContext, staging: any PackStaging) { self.context = context; self.staging = staging }

    var memoryBound: Int { staging.memoryBound }

    func receive(_ chunk: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        do {
            try decoder.feed(chunk) { part in
                switch part {
                case .header(let index, let digest, let length):
                    let record = PackRecord(index: index, digest: digest, length: length)
                    guard !Blocks.isZero(digest, length: length) else {
                        throw RequestFailure(400, "bad_request", "record \(index) (counting from 0) is block \(digest.hex), \(length) zero bytes: zero blocks are never stored or sent (they count as present); "
                                                 + "leave it out and send the pack again. Nothing of this pack was stored")
                    }
                    current = (record, try staging.begin(record) ? SHA256Hasher() : nil)
                case .bytes(let bytes):
                    guard let hasher = current?.hasher else { return }
                    hasher.update(bytes)
                    try staging.write(bytes)
                case .end:
                    guard let (record, hasher) = current else { return }
                    current = nil
                    guard let hasher else { return }
                    let actual = hasher.finish()
                    guard actual == record.digest else {
                        mismatch = record
                        throw RequestFailure(400, "block_checksum_mismatch", "record \(record.index) (counting from 0) names block \(record.digest.hex), but its \(record.length) bytes hash to \(actual.hex); "
                                                 + "nothing of this pack was stored: read the block again (its file may have changed) and send the pack again")
                    }
                    try staging.end()
                }
            }
        } catch let error as BlockPackError {
            fail(.error(400, "bad_request", "\(error); nothing of this pack was stored: "
                        + "each record is the block's 32-byte SHA-256, its length in 4 bytes big-endian, then its bytes (Docs/protocol.md, block packs)"))
        } catch {
            fail(ServerContext.failure(error))
        }
    }

    /// Refuses the pack: what was staged goes at once; the rest of the body is read and dropped.
    private func fail(_ reply: HTTPResponse) {
        failure = reply
        staging.discard()
    }

    func finish() -> HTTPResponse {
        if failure == nil {
            do { try decoder.finish() } catch {
                fail(.error(400, "bad_request", "\(error) (the body has \(decoder.records) records, the last one cut short); nothing of this pack was stored: "
                            + "Content-Length must be the sum of the records' sizes (36 bytes and the block's length each)"))
            }
        }
        // A record naming a block the workspace has at another length cannot hash to it
        // either: the length is the better diagnosis (asked here, off the connection's thread).
        if let record = mismatch, let stored = try? context.metadata.blockSize(record.digest.hex), stored != Int64(record.length) {
            return PackRefusal.sizeConflict(record, stored: stored).response
        }
        if let failure { return failure }
        return staging.commit()
    }

    func abort() { staging.discard() }
}
