import Crypto
import Dispatch
import ObjectStore
import Protocol
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A pack's blocks on the folder store: each record is written to a staging file of its
/// own as it arrives (nothing held in memory), and at the end of the body the new ones
/// are made durable all at once: one `syncfs` for their bytes, the renames into the
/// store, one `syncfs` for the renames, then one records transaction. An fdatasync per
/// block would be one journal commit each: 1,000 blocks of 16 KiB took 2.1-4.1 s that
/// way here against 0.15-0.24 s with the two syncfs (ext4, Docs/benchmarks.md). A block
/// whose file is in the store already (same size) is not written: its bytes are dropped.
final class FolderPackStaging: PackStaging {
    private let context: ServerContext
    private let store: BlobStore
    /// Records whose bytes are in a staging file, with its path.
    private var written: [(record: PackRecord, path: String)] = []
    /// Records dropped because the store has their block's file.
    private var skipped: [PackRecord] = []
    /// The record being written.
    private var open: (record: PackRecord, fd: Int32, path: String, position: Int64)?

    init(context: ServerContext, store: BlobStore) { self.context = context; self.store = store }

    var memoryBound: Int { 0 }

    func begin(_ record: PackRecord) throws -> Bool {
        if store.size(of: record.digest) == Int64(record.length) {
            skipped.append(record)
            return false
        }
        let file = try store.makeStagingFile()
        open = (record, file.fd, file.path, 0)
        return true
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard let file = open else { return }
        try FileIO.pwrite(file.fd, bytes, at: file.position)
        open?.position += Int64(bytes.count)
    }

    func end() throws {
        guard let file = open else { return }
        open = nil
        defer { FileIO.close(file.fd) }
        written.append((file.record, file.path))
        // Blocks are immutable once stored: write permission goes now, by descriptor.
        if fchmod(file.fd, 0o400) != 0 { throw Errno.current }
    }

    func discard() {
        if let file = open {
            FileIO.close(file.fd)
            _ = unlink(file.path)
            open = nil
        }
        for staged in written { _ = unlink(staged.path) }
        written = []
        skipped = []
    }

    func commit() -> HTTPResponse {
        var moved = Set<Int>()
        defer {
            for (i, staged) in written.enumerated() where !moved.contains(i) { _ = unlink(staged.path) }
            written = []
        }
        do {
            let rows = try context.metadata.blockSizes(Array(Set((written.map(\.record) + skipped).map(\.digest.hex))))
            for record in skipped {
                if let size = rows[record.digest.hex] {
                    if size != Int64(record.length) { throw PackRefusal.sizeConflict(record, stored: size) }
                } else if try context.presentBlockSize(record.digest) != Int64(record.length) {
                    // A file without its row that was found damaged (and removed), or that the collection took.
                    throw PackRefusal.gone(record)
                }
            }
            let new = try PackRefusal.lacking(written.map(\.record), rows: rows)
            let records = new.map { written[$0].record }
            try context.recordingWithinQuota(records.reduce(0) { $0 + Int64($1.length) }) {
                guard !new.isEmpty else { return }
                try FileIO.syncFileSystem(store.stagingRoot)
                for i in new {
                    let (record, path) = written[i]
                    try store.makeFolder(for: record.digest)
                    // Over a file of the same name if one came meanwhile: these bytes were checked.
                    try FileIO.rename(path, store.path(for: record.digest))
                    moved.insert(i)
                }
                try FileIO.syncFileSystem(store.root)
                try context.recordBlocks(records)
            }
            return .json(200, BlockPackResponse(stored: new.count, present: written.count + skipped.count - new.count))
        } catch let refusal as PackRefusal {
            return refusal.response
        } catch {
            return ServerContext.failure(error)
        }
    }
}

/// A pack's blocks on a server keeping blocks in an object store: each record is held in
/// memory (the pack is at most 16 MiB, reserved from the shared body budget), and at the
/// end of the body the new ones are PUT to the store by the server itself, several at
/// once, then recorded in one transaction. Nothing touches the server's disk.
final class ObjectPackStaging: PackStaging {
    private let context: ServerContext
    private let objects: ObjectBlocks
    private var held: [(record: PackRecord, bytes: [UInt8])] = []
    private var current: (record: PackRecord, bytes: [UInt8])?

    init(context: ServerContext, objects: ObjectBlocks) { self.context = context; self.objects = objects }

    var memoryBound: Int { API.maxPackBody }

    func begin(_ record: PackRecord) throws -> Bool {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(record.length)
        current = (record, bytes)
        return true
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws { current?.bytes.append(contentsOf: bytes) }

    func end() throws {
        if let current { held.append(current) }
        current = nil
    }

    func discard() {
        held = []
        current = nil
    }

    /// PUTs at once to the store: enough to hide a round trip each, few enough for its connections.
    static let width = 8

    func commit() -> HTTPResponse {
        defer { discard() }
        do {
            let rows = try context.metadata.blockSizes(Array(Set(held.map(\.record.digest.hex))))
            let new = try PackRefusal.lacking(held.map(\.record), rows: rows).map { held[$0] }
            try context.recordingWithinQuota(new.reduce(0) { $0 + Int64($1.record.length) }) {
                guard !new.isEmpty else { return }
                let objects = self.objects
                try Concurrently.run(new.count, width: Self.width) { i in try objects.put(new[i].record.digest, bytes: new[i].bytes) }
                try context.recordBlocks(new.map(\.record))
            }
            return .json(200, BlockPackResponse(stored: new.count, present: held.count - new.count))
        } catch let refusal as PackRefusal {
            return refusal.response
        } catch let error as ObjectStoreError {
            return error.response
        } catch {
            return ServerContext.failure(error)
        }
    }
}

/// Why a whole pack is refused at its end, with nothing of it stored.
enum PackRefusal: Error {
    /// The workspace has the record's block at another length.
    case sizeConflict(PackRecord, stored: Int64)
    /// The block's file went from the store while the pack came.
    case gone(PackRecord)

    var response: HTTPResponse {
        switch self {
        case .sizeConflict(let record, let stored):
            return .error(409, "size_conflict", "record \(record.index) (counting from 0) is block \(record.digest.hex) of \(record.length) bytes, but the workspace has that block with \(stored) bytes; "
                          + "nothing of this pack was stored: check the block's length and hash, and send the pack again without it")
        case .gone(let record):
            return .error(503, "unavailable", "record \(record.index) (counting from 0), block \(record.digest.hex), went from the store while the pack came; nothing of this pack was stored: send it again",
                          headers: [("Retry-After", "1")])
        }
    }

    /// The positions in `records` (verified, in pack order) of the blocks the workspace
    /// lacks, by `rows` (the stored sizes of their hashes): the first record of each such
    /// block; a later one of the same block is present by then.
    static func lacking(_ records: [PackRecord], rows: [String: Int64]) throws(PackRefusal) -> [Int] {
        var seen = Set<String>()
        var out: [Int] = []
        for (i, record) in records.enumerated() {
            if let size = rows[record.digest.hex] {
                if size != Int64(record.length) { throw .sizeConflict(record, stored: size) }
            } else if seen.insert(record.digest.hex).inserted {
                out.append(i)
            }
        }
        return out
    }
}

/// Runs `work(0..<count)` on up to `width` threads at once, waiting for all; throws the
/// first error (the others' work is done or skipped). For calls that each wait on the
/// network (the object store), from a worker thread.
enum Concurrently {
    static func run(_ count: Int, width: Int, _ work: @Sendable (Int) throws -> Void) throws {
        guard count > 0 else { return }
        let failure = Mutex<(any Error)?>(nil)
        let next = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: min(max(width, 1), count)) { _ in
            while failure.withLock({ $0 == nil }) {
                let i = next.withLock { n in defer { n += 1 }; return n }
                guard i < count else { return }
                do { try work(i) } catch { failure.withLock { if $0 == nil { $0 = error } } }
            }
        }
        if let error = failure.withLock({ $0 }) { throw error }
    }
}
