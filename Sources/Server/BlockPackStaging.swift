import Crypto
import Dispatch
import ObjectStore
import Protocol
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A pack's blocks on the folder store: each record is written as it arrives into a range
/// reserved at the end of the store's pack file (nothing held in memory, no file created),
/// and at the end of the body the new ones are made durable and indexed all at once (one
/// `fdatasync`, one transaction of the index: PackedBlocks.swift), then recorded in one
/// records transaction. A block the store holds already (its size checked at commit) is
/// not written: its bytes are dropped. Ranges whose blocks are not kept are punched.
final class FolderPackStaging: PackStaging {
    private let context: ServerContext
    private let store: FolderBlocks
    /// Records whose bytes are in the pack file, with their ranges' offsets.
    private var written: [(record: PackRecord, offset: Int64)] = []
    /// The pack file this server appends to, and its number.
    private var pack: (number: Int, file: PackFile)?
    /// Records dropped because the store holds their block.
    private var skipped: [PackRecord] = []
    /// The record being written: its range's offset, and how much of it is written.
    private var open: (record: PackRecord, offset: Int64, position: Int64)?

    init(context: ServerContext, store: FolderBlocks) { self.context = context; self.store = store }

    var memoryBound: Int { 0 }

    func begin(_ record: PackRecord) throws -> Bool {
        if try store.holds(record.digest) {
            skipped.append(record)
            return false
        }
        let pack = try self.pack ?? store.packed.appending()
        self.pack = pack
        open = (record, pack.file.reserve(record.length), 0)
        return true
    }

    func write(_ bytes: UnsafeRawBufferPointer) throws {
        guard let range = open else { return }
        try pack?.file.write(bytes, at: range.offset + range.position)
        open?.position += Int64(bytes.count)
    }

    func end() throws {
        guard let range = open else { return }
        open = nil
        written.append((range.record, range.offset))
    }

    func discard() {
        if let range = open {
            release(range.offset, range.record.length)
            open = nil
        }
        for staged in written { release(staged.offset, staged.record.length) }
        written = []
        skipped = []
    }

    /// Punches a range of the pack file whose block is not kept.
    private func release(_ offset: Int64, _ length: Int) {
        guard let pack else { return }
        store.packed.release(PackedBlocks.Range(pack: pack.number, offset: offset, length: length))
    }

    func commit() -> HTTPResponse {
        var kept = Set<Int>()
        defer {
            for (i, staged) in written.enumerated() where !kept.contains(i) { release(staged.offset, staged.record.length) }
            written = []
        }
        do {
            let rows = try context.metadata.blockSizes(Array(Set((written.map(\.record) + skipped).map(\.digest.hex))))
            for record in skipped {
                if let size = rows[record.digest.hex] {
                    if size != Int64(record.length) { throw PackRefusal.sizeConflict(record, stored: size) }
                } else if try context.presentBlockSize(record.digest) != Int64(record.length) {
                    // Bytes without their row that were found damaged (and removed), or that the collection took.
                    throw PackRefusal.gone(record)
                }
            }
            let new = try PackRefusal.lacking(written.map(\.record), rows: rows)
            let records = new.map { written[$0].record }
            try context.recordingWithinQuota(records.reduce(0) { $0 + Int64($1.length) }) {
                guard !new.isEmpty else { return }
                let indexed = try store.packed.index(new.map { (written[$0].record.digest, written[$0].offset, written[$0].record.length) })
                // Indexed meanwhile by another pack: that one's range is the block's, and this one goes.
                for (n, i) in new.enumerated() where !indexed.contains(n) { kept.insert(i) }
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
