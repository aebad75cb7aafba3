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

/// One block being rewritten: its whole new content (its length is the block's length
/// in the file), in a staging file outside the store, or in this process's memory for a
/// small file's only block; hashed as writes arrive in order from the block's start.
///
/// Hashing a large write waits until the write has been answered (see `PendingHash`):
/// the writer sends its next bytes while a FUSE worker hashes these on the other core.
/// Each in-order write takes a ticket (under the node's lock, so tickets follow the
/// order of the bytes) and updates the hash only in its turn; a commit waits for every
/// ticket before it reads the digest.
/// `@unchecked Sendable`: `hasher`, `hashedUpTo`, `ticketsIssued`, `memory` and the
/// direct descriptor's fields are guarded by the node's lock, `ticketsDone` by `turns`.
final class DirtyBlock: @unchecked Sendable {
    /// The staging file (-1 while the block is in `memory`).
    private(set) var fd: Int32
    private(set) var path: String
    /// A small file's block while it may still go to the pack: its bytes, here rather
    /// than in a memory file, whose fresh pages and descriptor cost a copy's worth of
    /// kernel time for every small file written (Docs/benchmarks.md). Moved to a staging
    /// file on the disk once the file outgrows the pack's limit (`moveToDisk`).
    private var memory: [UInt8]?
    /// The store the staging file came from, and goes back to.
    let store: BlobStore
    /// Fed with every byte in [0, hashedUpTo) in order; nil once a write broke the order
    /// (or the block started as a copy of stored bytes): the digest is then read back.
    var hasher: SHA256Hasher?
    var hashedUpTo = 0
    private var ticketsIssued = 0
    private var ticketsDone = 0
    private let turns = NSCondition()
    /// A second descriptor on the staging file, opened with O_DIRECT at the first large
    /// aligned write (-1 until then); `directRefused` once the file system refused it.
    private var directFd: Int32 = -1
    private var directRefused = false

    /// Writes at least this large are hashed after their reply; smaller ones at once
    /// (a thread's round trip would cost more than it hides).
    static let hashAfterReplyMinimum = 256 << 10

    /// A block staged in a file.
    init(fd: Int32, path: String, store: BlobStore, hashed: Bool) {
        self.fd = fd
        self.path = path
        self.store = store
        self.hasher = hashed ? SHA256Hasher() : nil
    }

    /// A block staged in memory, starting as `bytes`.
    init(memory bytes: [UInt8], store: BlobStore, hashed: Bool) {
        fd = -1
        path = ""
        memory = bytes
        self.store = store
        self.hasher = hashed ? SHA256Hasher() : nil
    }

    /// Writes `buffer` at `offset` of the staging file. Bytes that continue the running
    /// hash are hashed now (small writes) or returned as a `PendingHash` the caller runs
    /// once the write is answered, while `buffer` is still valid.
    /// Called with the node's lock held.
    func write(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws -> PendingHash? {
        do {
            if memory != nil {
                Self.copy(buffer, into: &memory!, at: offset)
            } else if try !writeDirectly(buffer, at: offset) {
                try FileIO.pwrite(fd, buffer, at: Int64(offset))
            }
        } catch {
            hasher = nil   // the file may hold part of the bytes: read back, if ever committed
            throw error
        }
        guard let hasher, offset == hashedUpTo else {
            hasher = nil
            return nil
        }
        hashedUpTo += buffer.count
        let pending = PendingHash(block: self, hasher: hasher, ticket: ticketsIssued, bytes: buffer)
        ticketsIssued += 1
        if buffer.count < Self.hashAfterReplyMinimum {
            pending.run()
            return nil
        }
        return pending
    }

    /// Writes at least this large, page-aligned in memory and in the file, go to the disk
    /// past the page cache (O_DIRECT).
    static let directMinimum = 256 << 10

    /// A large aligned write goes straight to the disk: the page cache's copy would be
    /// written into fresh pages, which on the machines measured cost more than the disk
    /// write itself (Docs/benchmarks.md, "Staging files written past the page cache").
    /// The bytes are the same either way; reads of the staging file see them (the kernel
    /// drops any cached page a direct write covers). Returns false when the write must go
    /// through the page cache instead (small, unaligned, in memory, or refused).
    private func writeDirectly(_ buffer: UnsafeRawBufferPointer, at offset: Int) throws -> Bool {
        let align = FileIO.directAlignment
        guard buffer.count >= Self.directMinimum, !inMemory, !directRefused, let base = buffer.baseAddress,
              Int(bitPattern: base) % align == 0, offset % align == 0, buffer.count % align == 0 else { return false }
        if directFd < 0 {
            guard let d = FileIO.openDirectForWriting(path) else { directRefused = true; return false }
            directFd = d
        }
        do {
            try FileIO.pwrite(directFd, buffer, at: Int64(offset))
        } catch let e as Errno where e == Errno.invalidArgument {
            directRefused = true   // an alignment this file system wants beyond the page's
            return false
        }
        return true
    }

    private func closeDirect() {
        if directFd >= 0 { FileIO.close(directFd); directFd = -1 }
    }

    /// Runs `update` in ticket `ticket`'s turn.
    fileprivate func inTurn(_ ticket: Int, _ update: () -> Void) {
        turns.lock()
        while ticketsDone != ticket { turns.wait() }
        turns.unlock()
        update()
        turns.lock()
        ticketsDone += 1
        turns.broadcast()
        turns.unlock()
    }

    /// Waits until every ticket issued has updated the hash. Called with the node's lock held.
    private func waitForHashing() {
        turns.lock()
        while ticketsDone != ticketsIssued { turns.wait() }
        turns.unlock()
    }

    /// The block's digest: the running hash when every byte came in order, else one read
    /// of at most one block. `hashedWhileWriting` tells which (for statistics).
    func digest(length: Int) throws -> (digest: SHA256Digest, hashedWhileWriting: Bool) {
        waitForHashing()
        if let hasher, hashedUpTo == length {
            self.hasher = nil
            return (hasher.finish(), true)
        }
        hasher = nil
        if let memory {
            let hasher = SHA256Hasher()
            memory.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0.prefix(length))) }
            return (hasher.finish(), false)
        }
        return (try BlobStore.hash(fd: fd, upTo: Int64(length)), false)
    }

    var inMemory: Bool { memory != nil }

    /// Copies `buffer` into `bytes` at `offset`, zeros filling any gap before it, as a
    /// write past the end of a file leaves a hole.
    private static func copy(_ buffer: UnsafeRawBufferPointer, into bytes: inout [UInt8], at offset: Int) {
        if offset > bytes.count { bytes.append(contentsOf: repeatElement(0, count: offset - bytes.count)) }
        let overlap = min(buffer.count, bytes.count - offset)
        if overlap > 0 {
            bytes.withUnsafeMutableBytes { UnsafeMutableRawBufferPointer(rebasing: $0[offset..<(offset + overlap)]).copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[0..<overlap])) }
        }
        if overlap < buffer.count { bytes.append(contentsOf: buffer[overlap...]) }
    }

    /// Fills `buffer` with the block's bytes from `offset`; EIO when the block is shorter
    /// (never zeros in place of bytes).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws {
        if let memory {
            guard offset + buffer.count <= memory.count else { throw Errno.ioError }
            memory.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + buffer.count)])) }
            return
        }
        if try FileIO.pread(fd, into: buffer, at: Int64(offset)) < buffer.count { throw Errno.ioError }
    }

    /// The block's first `length` bytes, for the pack.
    func bytes(length: Int) throws -> [UInt8] {
        if let memory, memory.count == length { return memory }
        var bytes = [UInt8](repeating: 0, count: length)
        try bytes.withUnsafeMutableBytes { try read(into: $0, at: 0) }
        return bytes
    }

    /// Cuts or zero-extends the block to `length` bytes.
    func truncate(to length: Int) throws {
        if memory != nil {
            if length < memory!.count { memory!.removeSubrange(length...) } else { memory!.append(contentsOf: repeatElement(0, count: length - memory!.count)) }
            return
        }
        try FileIO.ftruncate(fd, Int64(length))
    }

    /// The file grew past `InlineBlocks.limit`: its block goes to a staging file on the
    /// disk like any other. The running hash carries on. Called with the node's lock held.
    func moveToDisk() throws {
        guard let bytes = memory else { return }
        let (newFd, newPath) = try store.takeStagingFile()
        do {
            if !bytes.isEmpty { try bytes.withUnsafeBytes { try FileIO.pwrite(newFd, $0, at: 0) } }
            try FileIO.ftruncate(newFd, Int64(bytes.count))
        } catch {
            store.returnStagingFile(fd: newFd, path: newPath)
            throw error
        }
        memory = nil
        fd = newFd
        path = newPath
    }

    /// Gives the staging file back to the store: reused when its content was not
    /// stored, removed from the staging folder when it is now a stored block.
    func discard() {
        if memory != nil { memory = nil; return }
        closeDirect()
        store.returnStagingFile(fd: fd, path: path)
    }
}

/// The hashing of one in-order write, run by the thread that answered the write.
/// `bytes` is the request's buffer: `run` must be called before it is given back.
/// A pending hash left unrun would stall the block's commit, so every path runs it.
struct PendingHash: @unchecked Sendable {
    let block: DirtyBlock
    let hasher: SHA256Hasher
    let ticket: Int
    let bytes: UnsafeRawBufferPointer

    func run() {
        block.inTurn(ticket) { hasher.update(bytes) }
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
    /// The committed blocks that were online-only when the list was loaded. A read of
    /// one goes straight to the block cache: looking for its block file first cost a
    /// directory lookup per block on the reader's path, which waited for the disk when
    /// the folder was not cached. Stale is harmless: a block fetched since is found by
    /// the block cache.
    var notHeld: Set<SHA256Digest> = []
    /// Open descriptors of stored blocks, by digest (at most 8 per open file).
    var readers: [SHA256Digest: SharedDescriptor] = [:]
    /// Small blocks kept in the pack, read once per open file (at most 8).
    var inline: [SHA256Digest: InlineBytes] = [:]
    /// How much of the file's content not held here reads fetch (ReadaheadWindow.swift).
    var window = ReadaheadWindow()
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
        inline.removeAll()
    }
}

/// One open file handle: which node, and how it was opened.
struct FileHandle {
    let node: OpenNode
    let writable: Bool
}
