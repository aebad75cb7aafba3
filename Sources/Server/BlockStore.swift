import Crypto
import Protocol
import Storage

/// Where the server keeps blocks, as the handlers see it: one protocol, two stores.
/// `FolderBlocks` keeps each block as a file in `blobs/` of the data folder (the
/// embedded server); `ObjectBlocks` keeps each as an object in an S3 bucket (a scaled
/// server: several processes share it). A handler asks the store, never which store it
/// is. What only an object store offers, devices sending and fetching blocks straight
/// to and from it with presigned URLs, is the optional capability `presigned`.
/// Every method may be called from any thread.
protocol BlockStore: Sendable {
    /// Whether the block's bytes are in the store (a stat, or a HEAD of its object).
    func holds(_ digest: SHA256Digest) throws -> Bool

    /// The first of `digests` whose bytes are not in the store, nil when all are there.
    func firstLacking(_ digests: [SHA256Digest]) throws -> SHA256Digest?

    /// Hands the block's bytes to `consumer` in order, piece by piece; returns how many
    /// there were, nil when the store has no such block.
    func read(_ digest: SHA256Digest, _ consumer: @escaping (UnsafeRawBufferPointer) -> Void) throws -> Int64?

    /// The block opened for a reply that reads it piece by piece; nil when it cannot be
    /// read (gone, a failed fetch, or bytes that are not `length` long where the store
    /// fetches them whole).
    func open(_ digest: SHA256Digest, length: Int) -> OpenBlock?

    /// A file holding the block from `start`, opened for reading, for a reply the kernel
    /// sends straight from it (sendfile); nil from a store that keeps no files.
    func file(_ digest: SHA256Digest) throws -> (fd: Int32, start: Int64)?

    /// The blocks of one streamed reply (a pack), opened in the reply's order.
    func feed(_ records: [PackRecord]) -> any BlockFeed

    /// Stores a block whose bytes were checked against `digest` and staged in the file
    /// `stagingPath` (`fd` open on it), which it takes. Durable: once it returns, a crash
    /// keeps the block, so its row may be written.
    func adopt(stagingPath: String, fd: Int32, as digest: SHA256Digest) throws

    /// Removes a block's bytes; bytes already gone are fine.
    func remove(_ digest: SHA256Digest) throws

    /// The size of a block whose bytes are in the store though no row names it (a server
    /// killed between storing and recording), when they hash to its name; damaged bytes
    /// are removed. Nil when there is no such block.
    func unrecorded(_ digest: SHA256Digest) -> Int64?

    /// The body of a whole-block PUT (BlockPut.swift), for a block of `length` bytes the
    /// quota has room for: its bytes are checked against `digest`, stored and recorded.
    func putBody(_ digest: SHA256Digest, length: Int64, context: ServerContext) throws -> any RequestBody

    /// Where a block pack's records go while its body arrives (BlockPackUpload.swift).
    func packStaging(context: ServerContext) -> any PackStaging

    /// At a server's start, before any request: takes what this server writes to (the
    /// folder store: a pack file no other server holds) and tidies what a kill left there
    /// (bytes past its last indexed block).
    func takeForServing() throws

    /// URLs that let a device reach the store's blocks itself; nil when every block
    /// passes through the server (then devices upload by tus, to the server).
    var presigned: (any PresignedBlocks)? { get }
}

/// A store devices reach themselves: they PUT a block with a presigned URL, the server
/// verifies it once before recording it, and downloads are redirected to presigned GETs.
/// Blocks can so enter the store without a row: the collection lists them.
protocol PresignedBlocks: Sendable {
    /// The presigned PUT of one missing block, as the upload plan lists it, and when it expires.
    func plan(_ block: ServerContext.NeededBlock, expiresIn: Int64) -> (info: BlockUploadInfo, expires: Int64)

    /// Reads the block a device PUT and checks it against its name; bytes that are not
    /// the block are removed.
    func verify(_ digest: SHA256Digest) throws -> BlockVerdict

    /// A presigned GET of a stored block, where a download is redirected.
    func downloadURL(_ digest: SHA256Digest, expiresIn: Int64) -> String

    /// A page of the blocks in the store, in name order after the name `after`; `next`
    /// is where the following page starts (nil: nowhere), `more` whether there is one.
    func page(after: String?) throws -> (blocks: [ListedBlock], more: Bool, next: String?)
}

/// What a verification of a block PUT by a device found.
enum BlockVerdict: Equatable {
    /// The store holds exactly the block: `size` bytes hashing to its name.
    case verified(size: Int64)
    /// No block of that name (never PUT, or deleted).
    case absent
    /// The bytes are not the block (hash `actual`, `size` bytes): they were deleted.
    case mismatch(actual: SHA256Digest, size: Int64)
}

/// One block of a store's listing, with its size and when it was last written (nil
/// when the store does not say).
struct ListedBlock {
    let digest: SHA256Digest
    let size: Int64
    let modified: Int64?
}

/// A stored block open for a reply: its file (closed by `close`), its range of a pack
/// file (open as long as its store) or its bytes in memory.
enum OpenBlock {
    case file(Int32)
    case packed(PackFile, start: Int64, length: Int)
    case bytes([UInt8])

    /// Copies the block's bytes from `offset` into `piece`: how many, 0 at its end, nil
    /// when the file cannot be read.
    func read(into piece: UnsafeMutableRawBufferPointer, at offset: Int) -> Int? {
        switch self {
        case .file(let fd):
            return try? FileIO.pread(fd, into: piece, at: Int64(offset))
        case .packed(let pack, let start, let length):
            let count = max(0, min(piece.count, length - offset))
            guard count > 0 else { return 0 }
            return try? pack.read(into: UnsafeMutableRawBufferPointer(rebasing: piece[0..<count]), at: start + Int64(offset))
        case .bytes(let bytes):
            let count = max(0, min(piece.count, bytes.count - offset))
            if count > 0 { bytes.withUnsafeBytes { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + count])) } }
            return count
        }
    }

    func close() {
        if case .file(let fd) = self { FileIO.close(fd) }
    }
}

/// The blocks of one streamed reply, opened in the reply's order. Used by its
/// connection's thread only.
protocol BlockFeed: AnyObject {
    /// Record `index`'s block, open (the caller closes it); nil when it cannot be read.
    func block(_ index: Int) -> OpenBlock?
    /// The reply ended: nothing more is asked.
    func close()
}

/// A feed that opens each block when the reply reaches it, nothing ahead.
final class BlockByBlock: BlockFeed {
    private let records: [PackRecord]
    private let store: any BlockStore

    init(_ records: [PackRecord], store: any BlockStore) { self.records = records; self.store = store }

    func block(_ index: Int) -> OpenBlock? { store.open(records[index].digest, length: records[index].length) }
    func close() {}
}

extension FileIO {
    /// Hands a file's bytes from its start to `consumer` in pieces of at most 1 MiB, up
    /// to its end; returns how many there were.
    static func stream(_ fd: Int32, to consumer: (UnsafeRawBufferPointer) -> Void) throws -> Int64 {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while true {
            let n = try FileIO.pread(fd, into: buffer, at: offset)
            if n == 0 { return offset }
            consumer(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            offset += Int64(n)
        }
    }
}
