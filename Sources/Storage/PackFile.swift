import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Blocks one after the other in one file, each where its owner's row says: the drive's
/// small blocks (`small-blocks.pack` beside the catalog, `blocks.pack_offset`) and the
/// server's blocks that came in block packs (`blobs/packs/`, its index beside it).
///
/// Why not a file per block: every file is an inode, and on a disk that just freed many
/// (an ext4 without a journal skips recently freed inodes) an allocation costs 40-170 µs;
/// a new file costs a create, a rename and a directory entry made durable, where an
/// append costs a write into the page cache.
///
/// Layout: each block starts at a multiple of 4 KiB (`alignment`), so a block that goes
/// frees its disk blocks by punching a hole over its range (`release`); space is never
/// reused, so a range a row names is never written again. Appends go at the end; a
/// writer that streams a block reserves its range first (`reserve`) and fills it.
///
/// Crash argument (the owner's, Docs/architecture.md): bytes are written and made durable
/// (`sync`) before the transaction naming them; a kill leaves bytes no row names, at the
/// end (cut at the next open: `cutTail`) or punched when their writer gives up. A range
/// is punched only after the transaction dropping its row committed.
/// `@unchecked Sendable`: the descriptor is immutable; `state` guards the rest.
public final class PackFile: @unchecked Sendable {
    public static let alignment: Int64 = 4096
    public let path: String
    private let fd: Int32
    private struct State {
        var end: Int64
        /// Bytes appended since the last `sync`.
        var unsynced = false
    }
    private let state: Mutex<State>

    /// Opens the pack at `path`, created empty if missing when `writable`.
    public init(path: String, writable: Bool) throws {
        self.path = path
        fd = try FileIO.open(path, writable ? (O_RDWR | O_CREAT | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC), 0o600)
        let size: Int64
        do { size = Int64(try FileIO.status(fd).st_size) } catch {
            FileIO.close(fd)
            throw error
        }
        state = Mutex(State(end: Self.aligned(size)))
    }

    deinit { FileIO.close(fd) }

    public static func aligned(_ n: Int64) -> Int64 { (n + alignment - 1) / alignment * alignment }

    /// Writes `bytes` after the last block; returns their offset.
    public func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        let offset = reserve(bytes.count)
        try write(bytes, at: offset)
        return offset
    }

    /// A range of `length` bytes after the last block, for a block written in pieces
    /// (`write`); released by its writer when the block is not kept.
    public func reserve(_ length: Int) -> Int64 {
        state.withLock { s in
            let o = s.end
            s.end = Self.aligned(o + Int64(max(0, length)))
            return o
        }
    }

    /// Writes `bytes` at `offset`, inside a range this writer reserved.
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        try FileIO.pwrite(fd, bytes, at: offset)
        // After the write: a `sync` that ran in between has not covered these bytes.
        state.withLock { $0.unsynced = true }
    }

    /// Reads into `buffer` from `offset`: how many bytes (0 past the end).
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        try FileIO.pread(fd, into: buffer, at: offset)
    }

    /// A descriptor of its own on the file (the caller closes it), for a reply the kernel
    /// sends from it.
    public func duplicateDescriptor() throws -> Int32 {
        let copy = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        if copy < 0 { throw Errno.current }
        return copy
    }

    /// The `length` bytes at `offset`; throws `Errno.ioError` when the pack is shorter.
    public func read(at offset: Int64, length: Int) throws -> [UInt8] {
        guard offset >= 0, length >= 0 else { throw Errno.invalidArgument }
        var bytes = [UInt8](repeating: 0, count: length)
        try bytes.withUnsafeMutableBytes { buffer in
            var done = 0
            while done < length {
                let n = try FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), at: offset + Int64(done))
                if n == 0 { throw Errno.ioError }
                done += n
            }
        }
        return bytes
    }

    /// Frees the disk blocks of a block that no row names any more. A failure only costs
    /// space (the caller logs it).
    public func release(at offset: Int64, length: Int) throws {
        try FileIO.punchHole(fd, at: offset, length: Self.aligned(Int64(length)))
    }

    /// Where the next block would go: the end of the last one, aligned.
    public var end: Int64 { state.withLock { $0.end } }

    /// Cuts off what follows the last block a row names (`end`): bytes appended for
    /// changes a kill or a lost group took back. Only before the first append.
    public func cutTail(keeping end: Int64) throws {
        let keep = Self.aligned(max(0, end))
        let size = Int64(try FileIO.status(fd).st_size)
        if size > keep { try FileIO.ftruncate(fd, keep) }
        state.withLock { $0.end = keep }
    }

    /// fdatasync when anything was appended since the last one.
    public func sync() throws {
        let needed = state.withLock { s in
            let n = s.unsynced
            s.unsynced = false
            return n
        }
        guard needed else { return }
        do { try FileIO.fdatasync(fd) } catch {
            state.withLock { $0.unsynced = true }
            throw error
        }
    }
}
