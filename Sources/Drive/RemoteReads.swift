import Foundation
import Synchronization
import Crypto
import Storage

/// Reads of `Backups/` files: the content's block list (kept in the records table once
/// fetched, checked against the content hash and size), then each block the read
/// covers: a zero block from no disk, a block this drive holds from its store, any
/// other from the server through the block cache (only the chunks of the read and of
/// the open file's readahead window, each verified before a byte is served).
/// `@unchecked Sendable`: immutable after init; the table and remote are thread-safe.
public final class RemoteReads: @unchecked Sendable {
    let table: RecordsTable
    let remote: RemoteRecords
    /// True from a failed block-list fetch to the next good one: one log line per outage.
    private let outage = Mutex(false)

    public init(table: RecordsTable, remote: RemoteRecords) {
        self.table = table
        self.remote = remote
    }

    /// The block digests of `file`'s content: kept, else fetched and kept. A list that
    /// does not hash to the content or does not fit its size is refused (EIO).
    func blockList(_ file: RemoteFile) throws -> [SHA256Digest] {
        if let kept = try table.blockList(of: file.content), kept.count == Blocks.count(forSize: file.size) { return kept }
        let fetched: [SHA256Digest]
        do { fetched = try remote.blockList(of: file.content) } catch {
            var unavailable = false
            if case .unavailable = error { unavailable = true }
            let first = outage.withLock { o in defer { o = o || unavailable }; return !o }
            if first || !unavailable {
                DriveLog.error("the block list of content \(file.content.hex) could not be fetched (\(error)): reads of Backups/ files not read before fail with EIO")
            }
            throw Errno.ioError
        }
        outage.withLock { $0 = false }
        guard fetched.count == Blocks.count(forSize: file.size), ContentHash.of(blocks: fetched) == file.content else {
            DriveLog.error("the server's block list of content \(file.content.hex) does not match it (\(fetched.count) blocks for \(file.size) bytes): the read fails with EIO")
            throw Errno.ioError
        }
        try table.saveBlockList(fetched, of: file.content, size: file.size)
        return fetched
    }
}

/// Per open `Backups/` file: its readahead window and its block list.
/// `@unchecked Sendable`: both are guarded by `lock`.
final class RemoteHandle: @unchecked Sendable {
    let file: RemoteFile
    private let lock = NSLock()
    private var window = ReadaheadWindow()
    private var blocks: [SHA256Digest]?
    init(_ file: RemoteFile) { self.file = file }

    /// The content's block list, asked of `reads` once per open file.
    func blockList(_ reads: RemoteReads) throws -> [SHA256Digest] {
        if let kept = lock.withLock({ blocks }) { return kept }
        let list = try reads.blockList(file)
        lock.withLock { blocks = list }
        return list
    }

    /// What a read of `count` bytes at `offset` fetches (ReadaheadWindow.swift).
    func plan(_ offset: Int64, count: Int) -> ReadaheadWindow.Plan {
        lock.withLock { window.plan(offset: offset, count: count, size: file.size) }
    }
}

/// What an open virtual file reads from.
enum VirtualHandle {
    case generated([UInt8])
    case remote(RemoteHandle)
}

extension DriveFileSystem {
    /// A read of a `Backups/` file: the pieces of the blocks it covers, spliced into the
    /// reply like a local file's.
    func readRemote(_ handle: RemoteHandle, count: Int, at offset: Int64) throws -> ReadSource {
        let file = handle.file
        guard offset < file.size, count > 0 else { return .pieces([]) }
        guard let reads = remoteReads else {
            DriveLog.error("a Backups/ file was read but no workspace server is configured: the read fails with EIO")
            throw Errno.ioError
        }
        let blocks = try handle.blockList(reads)
        let plan = handle.plan(offset, count: count)
        let spans = Self.blockSpans(offset: offset, count: count, size: file.size)
        // The block cache: the stored block when this drive holds it, else the chunks of
        // the read and its window (a reader past its first 4 MiB in order: the whole
        // block), verified before use.
        let pieces: [ReadPiece] = try spans.map { span in
            let digest = blocks[span.index]
            let length = Blocks.length(ofBlock: span.index, fileSize: file.size)
            if Blocks.isZero(digest, length: length) { return .zeros(span.length) }
            let range = span.inBlock..<(span.inBlock + span.length)
            return try fetchedPiece(digest, blockLength: length, range: range,
                                    fetch: plan.wholeBlocks ? range : plan.fetch(inBlock: span.index, size: file.size),
                                    whole: plan.wholeBlocks)
        }
        guard let last = spans.last else { return .pieces(pieces) }
        if plan.wholeBlocks {
            for index in (last.index + 1)..<min(blocks.count, last.index + 1 + BlockCache.prefetchDepth) {
                let length = Blocks.length(ofBlock: index, fileSize: file.size)
                if !Blocks.isZero(blocks[index], length: length) { blockCache.prefetch(blocks[index], length: length) }
            }
        } else if plan.lastBlock > last.index {
            // The window reaches into the next block: its chunks come now, with the read.
            for index in stride(from: last.index + 1, through: min(plan.lastBlock, blocks.count - 1), by: 1) {
                let length = Blocks.length(ofBlock: index, fileSize: file.size)
                if Blocks.isZero(blocks[index], length: length) { continue }
                _ = try blockCache.descriptor(blocks[index], length: length, range: plan.fetch(inBlock: index, size: file.size),
                                              interactive: true, whole: false)
            }
        }
        return .pieces(pieces)
    }
}
