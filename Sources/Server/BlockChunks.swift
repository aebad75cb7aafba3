import Crypto
import Protocol
import Storage

/// The chunk digests of stored blocks (`GET /v1/blocks/<hash>/chunks`): computed the
/// first time a block's list is asked for (one read of the block) and kept in
/// `block_chunks`, so a block is read for this at most once. Kept in the database rather
/// than beside the block in the store: the store may be an object store (no cheap small
/// sidecar objects there), and a list is 16 × 32 bytes, the size of a block's row.
/// All of this module's SQL for it is here (one table, two statements).
enum BlockChunks {
    /// `server-004-block-chunks`: `digests` is the chunk digests' raw bytes, concatenated.
    static let migration = Migration("server-004-block-chunks", """
    CREATE TABLE block_chunks (hash TEXT PRIMARY KEY, digests BLOB NOT NULL) WITHOUT ROWID;
    """)

    static func handle(hash: String, context: ServerContext) -> HTTPResponse {
        do {
            let digest = try Validation.hash(hash)
            guard let size = try context.metadata.blockSize(digest.hex) else {
                return .error(404, "not_found", "the workspace has no block \(digest.hex) (zero blocks are never stored)")
            }
            let chunks = try list(digest, size: size, context: context)
            return .json(200, BlockChunksResponse(block: digest.hex, size: size, chunkSize: Blocks.chunkSize, chunks: chunks.map(\.hex)))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// The kept list, else the block read once, hashed by chunk and the list kept.
    static func list(_ digest: SHA256Digest, size: Int64, context: ServerContext) throws -> [SHA256Digest] {
        let kept = try context.metadata.blockChunks(digest.hex)
        let expected = Int((size + Int64(Blocks.chunkSize) - 1) / Int64(Blocks.chunkSize))
        if let kept, kept.count == expected * 32 {
            return stride(from: 0, to: kept.count, by: 32).map { SHA256Digest(bytes: Array(kept[$0..<($0 + 32)])) }
        }
        let computed = try compute(digest, size: size, context: context)
        try keep(digest, computed, context: context)
        return computed
    }

    /// Keeps a computed list.
    static func keep(_ digest: SHA256Digest, _ chunks: [SHA256Digest], context: ServerContext) throws {
        try context.metadata.setBlockChunks(digest.hex, chunks.flatMap(\.bytes))
    }

    /// Reads the block once from the store; a block that does not hash to its name is
    /// not listed (500: the store is damaged, and a list of its wrong bytes would vouch
    /// for them).
    static func compute(_ digest: SHA256Digest, size: Int64, context: ServerContext) throws -> [SHA256Digest] {
        let digester = ChunkDigester()
        guard try context.blocks.read(digest, { digester.update($0) }) != nil else { throw ChunkListError.damaged(digest.hex) }
        let (whole, chunks, count) = digester.finish()
        guard whole == digest, count == size else { throw ChunkListError.damaged(digest.hex) }
        return chunks
    }
}

/// The SHA-256 of a block and of each of its `Blocks.chunkSize` chunks, in one pass
/// over bytes arriving in pieces of any size.
final class ChunkDigester {
    private let whole = SHA256Hasher()
    private var chunk = SHA256Hasher()
    private var inChunk = 0
    private var chunks: [SHA256Digest] = []
    private var count: Int64 = 0

    func update(_ bytes: UnsafeRawBufferPointer) {
        whole.update(bytes)
        count += Int64(bytes.count)
        var rest = bytes[...]
        while !rest.isEmpty {
            let take = min(rest.count, Blocks.chunkSize - inChunk)
            chunk.update(UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
            inChunk += take
            rest = rest.dropFirst(take)
            if inChunk == Blocks.chunkSize {
                chunks.append(chunk.finish())
                chunk = SHA256Hasher()
                inChunk = 0
            }
        }
    }

    /// The block's digest, its chunk digests (the last may be short) and its length.
    func finish() -> (whole: SHA256Digest, chunks: [SHA256Digest], count: Int64) {
        if inChunk > 0 { chunks.append(chunk.finish()) }
        return (whole.finish(), chunks, count)
    }
}

enum ChunkListError: Error, CustomStringConvertible {
    case damaged(String)
    var description: String { "block \(self.hash) in the store is short or does not hash to its name: restore it from another copy" }
    private var hash: String { if case .damaged(let h) = self { return h }; return "" }
}
