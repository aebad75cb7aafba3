import Foundation
import Crypto
import Storage
import Synchronization

/// Small files keep their one block in the pack beside the catalog (PackFile.swift,
/// placed by `blocks.pack_offset`), not in a file of its own under `blobs/`.
///
/// Why: every block file is an inode on the disk. Unpacking a source tree (8,000 files
/// of 14 KB on average) allocated one staging inode per file, linked it into the store
/// and removed its staging name; on this machine's ext4 an allocation after many
/// deletes costs 40-170 µs alone (Docs/benchmarks.md). Packed, a small block costs one
/// write into the pack's page cache and a row of the commit.
///
/// What stays the same: the block is named by its SHA-256, has its `blocks` row (refs,
/// generation), is deduplicated, hashed while written and sent to the server like any
/// other block. A read of its file and the mirror's packs going up take its bytes from
/// memory (`InlineBytes`, `StoredBlocks.read`); every other reader of blocks
/// (copy-on-write, the backup) gets a descriptor on them (a memory file) and works unchanged.
///
/// What differs: the block is staged in memory while written (the draft's bytes, moved to a
/// staging file on the disk if the file grows past `limit`); the flusher syncs the pack
/// with the catalog, and after an unclean stop newer packed blocks are re-hashed like
/// block files; made online-only or evicted as cache, its range of the pack is punched
/// where a file would be unlinked. Files a change follower keeps as block files
/// (`ChangeJournal.keepsBlockFiles`: the backup's photos) always get them (the backup's
/// uploads work on those).
public enum InlineBlocks {
    /// 64 KiB: 96% of the files of `/usr/include`.
    public static let limit = 64 << 10
}

/// A stored block as `StoredBlocks.read` gives it.
public enum StoredBlock: Sendable {
    /// Its file, open read-only; the caller closes it.
    case file(Int32)
    /// A small block's bytes, kept in the pack.
    case inline([UInt8])
}

/// The workspace's blocks as another process or thread reads them (the backup, the
/// `sync` task): a packed block as its bytes or a memory file, else its block file.
/// Holds its own read-only connection to the catalog and descriptor on the pack, opened
/// at first need.
public final class StoredBlocks: Sendable {
    public let blobs: BlobStore
    private let catalogPath: String
    private let connection = Mutex<(db: Database?, pack: PackFile?)>((nil, nil))

    public init(blobs: BlobStore, catalogPath: String) {
        self.blobs = blobs
        self.catalogPath = catalogPath
    }

    /// Opens the block named `digest` read-only; throws `Errno.noSuchFileOrDirectory` when
    /// it is neither packed nor in the store.
    public func open(_ digest: SHA256Digest) throws -> Int32 {
        switch try read(digest) {
        case .file(let fd): return fd
        case .inline(let bytes): return try BlobStore.memoryFile(holding: bytes)
        }
    }

    /// The block named `digest` as it is kept: a packed block's bytes, or
    /// a read-only descriptor on its file (the caller closes it). For a reader that can
    /// take bytes (a pack going up) a small block costs no memory file.
    public func read(_ digest: SHA256Digest) throws -> StoredBlock {
        if let bytes = try inlineBytes(digest) { return .inline(bytes) }
        return .file(try blobs.open(digest))
    }

    private func inlineBytes(_ digest: SHA256Digest) throws -> [UInt8]? {
        try connection.withLock { c in
            if c.db == nil { c.db = try Database(path: catalogPath, options: .init(readOnly: true, create: false)) }
            guard let range = try Catalog.packedRange(digest, in: c.db!) else { return nil }
            if c.pack == nil { c.pack = try PackFile(path: PackFile.path(besideCatalog: catalogPath), writable: false) }
            return try c.pack!.read(at: range.offset, length: range.length)
        }
    }
}

/// Bytes a read's reply points at until it is sent: a block just fetched (`FetchedBlock`),
/// or a small block's bytes read from the pack (`InlineBytes`).
protocol ReplyBytes: AnyObject, Sendable {
    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer
}

/// A small block's bytes, read from the pack once per open file and answered from
/// memory: a descriptor on a memory file made for each open (a `memfd_create`, a write,
/// then a splice per read) cost more than the read itself.
final class InlineBytes: ReplyBytes, @unchecked Sendable {   // immutable after init
    private let memory: UnsafeMutableRawBufferPointer

    init(_ bytes: [UInt8]) {
        memory = UnsafeMutableRawBufferPointer.allocate(byteCount: max(bytes.count, 1), alignment: 16)
        bytes.withUnsafeBytes { memory.copyMemory(from: $0) }
    }

    deinit { memory.deallocate() }

    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: memory[range]) }
}
