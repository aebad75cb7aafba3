import Foundation
import Crypto
import Storage
import CLinux

/// A descriptor closed when the last reference goes away, so a reader can keep
/// using a block's descriptor while a commit swaps in new content.
final class SharedDescriptor: Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
    deinit { FileIO.close(fd) }
}

/// One block being rewritten: a staging file outside the store holding the block's
/// whole new content (its length is the block's length in the file), hashed as
/// writes arrive in order from the block's start.
final class DirtyBlock {
    let fd: Int32
    let path: String
    /// The store the staging file came from, and goes back to.
    let store: BlobStore
    /// Fed with every byte in [0, hashedUpTo) in order; nil once a write broke the order
    /// (or the block started as a copy of stored bytes): the digest is then read back.
    var hasher: SHA256Hasher?
    var hashedUpTo = 0

    init(fd: Int32, path: String, store: BlobStore, hashed: Bool) {
        self.fd = fd
        self.path = path
        self.store = store
        self.hasher = hashed ? SHA256Hasher() : nil
    }

    func noteWrite(_ buffer: UnsafeRawBufferPointer, at offset: Int) {
        if let hasher, offset == hashedUpTo {
            hasher.update(buffer)
            hashedUpTo += buffer.count
        } else {
            hasher = nil
        }
    }

    /// The block's digest: the running hash when every byte came in order, else one read
    /// of at most one block. `hashedWhileWriting` tells which (for statistics).
    func digest(length: Int) throws -> (digest: SHA256Digest, hashedWhileWriting: Bool) {
        if let hasher, hashedUpTo == length {
            self.hasher = nil
            return (hasher.finish(), true)
        }
        hasher = nil
        return (try BlobStore.hash(fd: fd, upTo: Int64(length)), false)
    }

    /// Gives the staging file back to the store: reused when its content was not
    /// stored, removed from the staging folder when it is now a stored block.
    func discard() {
        store.returnStagingFile(fd: fd, path: path)
    }
}

/// Content being written to one file since its last commit: the committed block list
/// it started from, the blocks rewritten since, and the size. A write touches only the
/// blocks it covers; a commit records only those (see `DriveFileSystem.commit`).
///
/// Invariant: a dirty block's staging file is exactly `Blocks.length(ofBlock:fileSize: size)`
/// long, so the bytes of block i are: its dirty file, else its stored block, else zeros.
final class Draft {
    /// The committed blocks this draft started from (holes have no entry). Blocks past
    /// the end are dropped as the size shrinks.
    var stored: [Int: SHA256Digest]
    var dirty: [Int: DirtyBlock] = [:]
    /// Indices that became holes (truncated away, then the file grew again).
    var cleared: Set<Int> = []
    var size: Int64
    /// True once anything changed (a commit is due).
    var changed = false
    /// Set when a write failed (ENOSPC, EIO): this content must never be committed,
    /// so the file keeps its previous version and the writer hears the error again at close.
    var failure: Errno?
    /// The modification time to commit: the last write's, or one set explicitly
    /// (cp -p sets it with futimens after writing and before close).
    var mtime: Int64
    /// The change time shown while the draft is open (a truncate, a chmod).
    var ctime: Int64?
    /// chmod, chown and utimens of the file while it is being written: shown at once,
    /// committed with the content (see `DriveFileSystem.deferToDraft`).
    var attributes = AttributeChanges()

    init(stored: [Int: SHA256Digest], size: Int64) {
        self.stored = stored
        self.size = size
        self.mtime = nowNanoseconds()
    }

    func discard() {
        for b in dirty.values { b.discard() }
        dirty.removeAll()
    }
}

/// The shared state of one inode while at least one handle has it open.
/// Lock order: an `OpenNode`'s lock is taken before the catalog's, never after.
/// `@unchecked Sendable`: all mutable fields are accessed under `lock`.
final class OpenNode: @unchecked Sendable {
    let ino: UInt64
    let lock = NSLock()
    var handles = 0
    /// Handles opened for writing (guarded by the file system's tables lock, not `lock`).
    var writers = 0
    var draft: Draft?
    /// The committed block list and size, cached for reads (nil until the first read;
    /// dropped at every commit).
    var committed: [Int: SHA256Digest]?
    var committedSize: Int64 = 0
    /// Open descriptors of stored blocks, by digest (at most 8 per open file).
    var readers: [SHA256Digest: SharedDescriptor] = [:]
    /// Where the last read ended (a read starting there is sequential), and the block
    /// last asked of the disk ahead of the reader.
    var sequentialEnd: Int64 = 0
    /// Bytes read in order up to `sequentialEnd` (a thumbnailer's first read is not a run).
    var sequentialRun: Int64 = 0
    var prefetched: SHA256Digest?

    init(ino: UInt64) { self.ino = ino }

    /// A stored block's descriptor, opened once per open file.
    func reader(_ digest: SHA256Digest, open: (SHA256Digest) throws -> Int32) throws -> SharedDescriptor {
        if let d = readers[digest] { return d }
        if readers.count >= 8 { readers.removeAll(keepingCapacity: true) }   // a sequential reader needs two
        let d = SharedDescriptor(try open(digest))
        readers[digest] = d
        return d
    }

    func dropCaches() {
        committed = nil
        readers.removeAll()
    }
}

/// One open file handle: which node, and how it was opened.
struct FileHandle {
    let node: OpenNode
    let writable: Bool
}
