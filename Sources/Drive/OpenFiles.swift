import Foundation
import Crypto
import Storage
import CLinux

/// A descriptor closed when the last reference goes away, so a reader can keep
/// using a blob's descriptor while a commit swaps in new content.
final class SharedDescriptor: Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
    deinit { FileIO.close(fd) }
}

/// Content being written: a staging file outside the blob store, hashed as
/// sequential writes arrive.
final class Staging {
    let fd: Int32
    let path: String
    var size: Int64
    /// Fed with every byte in [0, hashedUpTo) in order; nil once a write broke the order.
    var hasher: SHA256Hasher?
    var hashedUpTo: Int64 = 0
    var dirty = false
    /// Set when a write failed (ENOSPC, EIO): this content must never be committed,
    /// so the file keeps its previous version and the writer hears the error again at close.
    var failure: Errno?
    /// The modification time to commit: the last write's, or one set explicitly
    /// (cp -p sets it with futimens after writing and before close).
    var mtime: Int64

    init(fd: Int32, path: String, size: Int64, hashed: Bool) {
        self.fd = fd
        self.path = path
        self.size = size
        self.hasher = hashed ? SHA256Hasher() : nil
        self.mtime = nowNanoseconds()
    }

    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int64) throws {
        if let failure { throw failure }
        do { try FileIO.pwrite(fd, buffer, at: offset) } catch let error as Errno {
            failure = error
            throw error
        }
        if let hasher, offset == hashedUpTo {
            hasher.update(buffer)
            hashedUpTo += Int64(buffer.count)
        } else {
            hasher = nil
        }
        size = max(size, offset + Int64(buffer.count))
        dirty = true
        mtime = nowNanoseconds()
    }

    func truncate(to newSize: Int64) throws {
        try FileIO.ftruncate(fd, newSize)
        if newSize < hashedUpTo { hasher = nil }
        size = newSize
        dirty = true
        mtime = nowNanoseconds()
    }

    /// The content's digest: from the running hash when every byte came in order,
    /// else by reading the staging file once.
    func digest() throws -> SHA256Digest {
        if let hasher, hashedUpTo == size {
            self.hasher = nil
            return hasher.finish()
        }
        hasher = nil
        return try BlobStore.hash(fd: fd, upTo: size)
    }

    func discard() {
        FileIO.close(fd)
        _ = unlink(path)
    }
}

/// The shared state of one inode while at least one handle has it open.
/// Lock order: an `OpenNode`'s lock is taken before the catalog's, never after.
/// `@unchecked Sendable`: all mutable fields are accessed under `lock`.
final class OpenNode: @unchecked Sendable {
    let ino: UInt64
    let lock = NSLock()
    var handles = 0
    var staging: Staging?
    var reader: SharedDescriptor?
    var readerDigest: SHA256Digest?

    init(ino: UInt64) { self.ino = ino }
}

/// One open file handle: which node, and how it was opened.
struct FileHandle {
    let node: OpenNode
    let writable: Bool
}
