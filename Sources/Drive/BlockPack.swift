import Foundation
import Storage
import Synchronization

/// The bytes of small blocks (InlineBlocks.swift), one after the other in one file beside
/// the catalog, `small-blocks.pack`; each block's row in the catalog says where (`blocks.pack_offset`).
///
/// Why a file of its own and not the catalog: kept in SQLite, each small file's bytes were
/// written three times under the catalog's lock (into the B-tree's overflow pages, into
/// the WAL at the group's commit, into the database file at the checkpoint), and 347 MB of
/// small files made the WAL wrap every few seconds. Appended here they are written once,
/// into the page cache, and the catalog's transaction carries 30 bytes per block. Measured
/// on `cp -r` of 10,000 files of 4-64 KiB into a mount (Docs/benchmarks.md, "Small blocks
/// in a pack file").
///
/// Why not a file per block: every file is an inode, and on a disk that just freed many
/// (an ext4 without a journal skips recently freed inodes) an allocation costs 40-170 µs.
///
/// Layout: each block starts at a multiple of 4 KiB (`alignment`), so a block that goes
/// frees its disk blocks by punching a hole over its range (`release`); space is never
/// reused, so a range a row names is never written again. Appends go at the end.
///
/// Crash argument (Docs/architecture.md, "Small blocks in a pack file"): bytes are
/// appended before the transaction naming them; a kill or a lost group leaves bytes no
/// row names, at the end (cut at the next open: `cutTail`) or punched when the group is
/// lost. A range is punched only after the transaction dropping its row committed. The
/// flusher fdatasyncs the pack before the catalog's WAL (Durability.swift), and after an
/// unclean stop blocks newer than the last durable generation are re-hashed, as block
/// files are.
/// `@unchecked Sendable`: the descriptor is immutable; `state` guards the rest.
public final class BlockPack: @unchecked Sendable {
    public static let alignment: Int64 = 4096
    public let path: String
    private let fd: Int32
    private struct State {
        var end: Int64
        /// Bytes appended since the last `sync`.
        var unsynced = false
    }
    private let state: Mutex<State>

    /// The pack of the catalog at `catalogPath` (the same folder).
    public static func path(besideCatalog catalogPath: String) -> String {
        (catalogPath as NSString).deletingLastPathComponent + "/small-blocks.pack"
    }

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

    static func aligned(_ n: Int64) -> Int64 { (n + alignment - 1) / alignment * alignment }

    /// Writes `bytes` after the last block; returns their offset.
    public func append(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        let offset = state.withLock { s in
            let o = s.end
            s.end = Self.aligned(o + Int64(bytes.count))
            return o
        }
        try FileIO.pwrite(fd, bytes, at: offset)
        // After the write: a `sync` that ran in between has not covered these bytes.
        state.withLock { $0.unsynced = true }
        return offset
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
    /// space: logged.
    public func release(at offset: Int64, length: Int) {
        do { try FileIO.punchHole(fd, at: offset, length: Self.aligned(Int64(length))) } catch {
            DriveLog.error("freeing \(length) bytes at \(offset) of \(path) failed: \(error); the space stays used")
        }
    }

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
