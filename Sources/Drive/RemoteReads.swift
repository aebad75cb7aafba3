import Foundation
import Synchronization
import Crypto
import Storage

/// Reads of `Backups/` files: the content's block list (kept in the records table once
/// fetched, checked against the content hash and size), then each block the read
/// covers: a zero block from no disk, a block this drive holds from its store, any
/// other from the server through the block cache (only the chunks the read needs,
/// each verified before a byte is served).
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

/// Per open `Backups/` file: where the last read ended, so a sequential reader is
/// recognised, and its block list. `@unchecked Sendable`: both are guarded by `lock`.
final class RemoteHandle: @unchecked Sendable {
    let file: RemoteFile
    private let lock = NSLock()
    private var sequentialEnd: Int64 = -1
    private var blocks: [SHA256Digest]?
    init(_ file: RemoteFile) { self.file = file }

    /// The content's block list, asked of `reads` once per open file.
    func blockList(_ reads: RemoteReads) throws -> [SHA256Digest] {
        if let kept = lock.withLock({ blocks }) { return kept }
        let list = try reads.blockList(file)
        lock.withLock { blocks = list }
        return list
    }

    /// True when this read continues the previous one past the file's start (a copy, a
    /// player; a thumbnailer reading the first bytes is not one), as for local files.
    func isSequential(_ offset: Int64, count: Int) -> Bool {
        lock.withLock {
            defer { sequentialEnd = offset + Int64(count) }
            return offset > 0 && offset == sequentialEnd
        }
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
        let sequential = handle.isSequential(offset, count: count)
        let spans = Self.blockSpans(offset: offset, count: count, size: file.size)
        // The block cache: the stored block when this drive holds it, else the chunks the
        // read covers (a sequential reader: the whole block), verified before use.
        let pieces: [ReadPiece] = try spans.map { span in
            let digest = blocks[span.index]
            let length = Blocks.length(ofBlock: span.index, fileSize: file.size)
            if Blocks.isZero(digest, length: length) { return .zeros(span.length) }
            return try fetchedPiece(digest, blockLength: length, range: span.inBlock..<(span.inBlock + span.length), whole: sequential)
        }
        if sequential, let last = spans.last {
            for index in (last.index + 1)..<min(blocks.count, last.index + 1 + BlockCache.prefetchDepth) {
                let length = Blocks.length(ofBlock: index, fileSize: file.size)
                if !Blocks.isZero(blocks[index], length: length) { blockCache.prefetch(blocks[index], length: length) }
            }
        }
        return .pieces(pieces)
    }
}
