import Dispatch
import Synchronization
import Crypto
#if canImport(Glibc)
import Glibc
#endif

/// Memory for one block: an anonymous mapping of `Blocks.size` bytes, aligned to 2 MiB
/// and advised as huge pages.
struct BlockMemory: @unchecked Sendable {
    static let alignment = 2 << 20
    let mapping: UnsafeMutableRawPointer
    let base: UnsafeMutableRawPointer

    /// nil when the system has no memory to give (the fetch then goes to disk only).
    static func map() -> BlockMemory? {
        guard let p = mmap(nil, Blocks.size + alignment, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              p != MAP_FAILED else { return nil }
        let aligned = (UInt(bitPattern: p) + UInt(alignment - 1)) & ~UInt(alignment - 1)
        let base = UnsafeMutableRawPointer(bitPattern: aligned)!
        _ = madvise(base, Blocks.size, 14)   // MADV_HUGEPAGE
        return BlockMemory(mapping: p, base: base)
    }

    func unmap() { munmap(mapping, Blocks.size + Self.alignment) }
}

/// The bytes of one block fetched whole from the server, held in memory. Filled while
/// the block arrives; served only after the whole block hashed to its name. Its memory
/// goes back to `FetchedBlocks`' pool when the last holder lets go (a reply in flight
/// holds it too).
/// `@unchecked Sendable`: the bytes are written only before `FetchedBlocks.publish`
/// and only read after it.
final class FetchedBlock: ReplyBytes, @unchecked Sendable {
    let capacity: Int
    private let memory: BlockMemory
    private let owner: FetchedBlocks
    /// Bytes filled so far; the block's length once published.
    private(set) var length = 0

    fileprivate init(capacity: Int, memory: BlockMemory, owner: FetchedBlocks) {
        self.capacity = capacity
        self.memory = memory
        self.owner = owner
    }

    deinit { owner.recycle(memory) }

    /// Appends a piece as it arrives. Bytes past the capacity are not kept: such a block
    /// arrived longer than its length, fails its check, and is never published.
    func append(_ piece: UnsafeRawBufferPointer) {
        guard let from = piece.baseAddress, length + piece.count <= capacity else { return }
        (memory.base + length).copyMemory(from: from, byteCount: piece.count)
        length += piece.count
    }

    /// Starts again empty (a retried fetch).
    func reset() { length = 0 }

    func bytes(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: memory.base + range.lowerBound, count: range.count)
    }
}

/// Blocks just fetched whole (for a sequential reader, or ahead of it), kept in memory
/// after their check so that the reader is answered from them: the fetch writes the
/// block to the disk past the page cache, and reading it back from there cost a disk
/// read and a copy per byte (17% of the mount's CPU in a profile of a cold read).
///
/// Bounded: at most `limit` blocks. A block leaves when every byte of it has been served
/// once (a sequential reader does not come back for it), when newer blocks push it out,
/// or when it was kept longer than `maxAge`; its later reads go to the stored block.
///
/// The memory of blocks that left is kept in a pool for the next fetch, up to `poolLimit`
/// mappings, and unmapped after `poolIdle` unused. Measured on these machines: fresh
/// pages cost 0.45 CPU-s per GiB filled in faults and zeroing (4 KiB pages), and still
/// 14% of the mount's CPU during a cold read with huge pages; reused ones nothing.
/// `@unchecked Sendable`: state is in a `Mutex`.
final class FetchedBlocks: @unchecked Sendable {
    private struct Entry {
        let block: FetchedBlock
        let published: Int64
        var served: Int
    }
    private struct State {
        var entries: [SHA256Digest: Entry] = [:]
        var order: [SHA256Digest] = []
        var pool: [(memory: BlockMemory, since: Int64)] = []
        var trimScheduled = false
    }
    private let state = Mutex(State())
    let limit: Int
    let maxAge: Int64
    let poolLimit: Int
    let poolIdle: Int64

    init(limit: Int, poolLimit: Int, maxAgeSeconds: Double = 10, poolIdleSeconds: Double = 2) {
        self.limit = limit
        self.poolLimit = poolLimit
        maxAge = Int64(maxAgeSeconds * 1e9)
        poolIdle = Int64(poolIdleSeconds * 1e9)
    }

    /// An empty block to fill with up to `capacity` bytes (at most `Blocks.size`), or nil
    /// when no memory can be had.
    func makeBlock(capacity: Int) -> FetchedBlock? {
        guard capacity <= Blocks.size else { return nil }
        guard let memory = state.withLock({ $0.pool.popLast()?.memory }) ?? BlockMemory.map() else { return nil }
        return FetchedBlock(capacity: capacity, memory: memory, owner: self)
    }

    /// A block's memory, back from a block nobody holds any more.
    fileprivate func recycle(_ memory: BlockMemory) {
        let now = nowNanoseconds()
        let (kept, schedule) = state.withLock { s -> (Bool, Bool) in
            guard s.pool.count < poolLimit else { return (false, false) }
            s.pool.append((memory, now))
            return (true, Self.claimTrim(&s))
        }
        if !kept { memory.unmap() }
        if schedule { scheduleTrim() }
    }

    /// True when the caller must schedule the trim (none is pending).
    private static func claimTrim(_ s: inout State) -> Bool {
        defer { s.trimScheduled = true }
        return !s.trimScheduled
    }

    /// Every `poolIdle` while anything is held: blocks kept past `maxAge` go (a reader
    /// that stopped before their end), then memory idle in the pool is unmapped. So a
    /// drive at rest holds none of it.
    private func scheduleTrim() {
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + .nanoseconds(Int(poolIdle))) { [self] in
            let now = nowNanoseconds()
            var expired: [FetchedBlock] = []
            let (idle, again) = state.withLock { s -> ([BlockMemory], Bool) in
                expired = Self.expire(&s, now: now, maxAge: maxAge)
                let idle = s.pool.filter { now - $0.since >= poolIdle }.map(\.memory)
                s.pool.removeAll { now - $0.since >= poolIdle }
                s.trimScheduled = !s.pool.isEmpty || !s.entries.isEmpty
                return (idle, s.trimScheduled)
            }
            for m in idle { m.unmap() }
            expired.removeAll()   // their memory goes to the pool (outside the lock), trimmed next time
            if again { scheduleTrim() }
        }
    }

    /// Mappings held in the pool (for tests).
    var pooled: Int { state.withLock { $0.pool.count } }

    var count: Int { state.withLock { $0.entries.count } }

    /// True while `hash`'s checked bytes are held.
    func holds(_ hash: SHA256Digest) -> Bool { state.withLock { $0.entries[hash] != nil } }

    /// Makes a checked block servable. The oldest goes when the bound is reached.
    func publish(_ hash: SHA256Digest, _ block: FetchedBlock) {
        let now = nowNanoseconds()
        var dropped: [FetchedBlock] = []   // released outside the lock
        let schedule = state.withLock { s -> Bool in
            // A block replaced or dropped is released outside the lock: its memory goes
            // back to the pool, which takes the lock.
            if let old = s.entries[hash] { dropped.append(old.block) } else { s.order.append(hash) }
            s.entries[hash] = Entry(block: block, published: now, served: 0)
            while s.order.count > limit {
                let oldest = s.order.removeFirst()
                if let e = s.entries.removeValue(forKey: oldest) { dropped.append(e.block) }
            }
            return Self.claimTrim(&s)
        }
        dropped.removeAll()
        if schedule { scheduleTrim() }
    }

    /// The block, when held, for a read of `range` of it; counts the bytes served, and
    /// lets the block go once all of them were.
    func take(_ hash: SHA256Digest, _ range: Range<Int>) -> FetchedBlock? {
        state.withLock { s -> FetchedBlock? in
            guard var e = s.entries[hash], range.upperBound <= e.block.length else { return nil }
            e.served += range.count
            if e.served >= e.block.length {
                s.entries[hash] = nil
                s.order.removeAll { $0 == hash }
            } else {
                s.entries[hash] = e
            }
            return e.block
        }
    }

    private static func expire(_ s: inout State, now: Int64, maxAge: Int64) -> [FetchedBlock] {
        var dropped: [FetchedBlock] = []
        while let oldest = s.order.first, let e = s.entries[oldest], now - e.published > maxAge {
            s.order.removeFirst()
            s.entries[oldest] = nil
            dropped.append(e.block)
        }
        return dropped
    }
}
