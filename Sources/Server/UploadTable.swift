import Crypto
import Foundation
import Storage
import Synchronization

/// The SHA-256 of an upload's verified bytes, computed on its own thread, trailing the
/// writer by at most one PATCH: after each PATCH that ends well, `advance(to:)` lets it
/// read and hash the new bytes back from the staging file (page cache) while the next
/// PATCH arrives. So the whole-block check at the end costs neither a pass on the
/// receiving thread nor a re-read of the file. Only verified bytes are hashed, so a
/// discarded chunk never pollutes it. Made when an upload starts at offset 0 in this
/// process; after a restart the commit reads the file once instead.
/// `@unchecked Sendable`: every field is guarded by `condition`; the hasher is used by
/// the helper thread only, and read by `finish` after the thread is done.
final class TrailingHasher: @unchecked Sendable {
    private let condition = NSCondition()
    private var target: Int64 = 0
    private var hashed: Int64 = 0
    private var stopped = false
    private var exited = false
    private var failed = false
    private let hasher = SHA256Hasher()

    /// The key its `UploadTable` knows it by.
    let key: Int

    /// Starts the thread on the file at `path`; `onExit` runs when it ends (its file closed).
    init(path: String, key: Int = 0, onExit: @escaping @Sendable () -> Void = {}) {
        self.key = key
        Thread(named: "vd-upload-hash") { [self] in
            run(path: path)
            onExit()
        }.start()
    }

    /// The offset the hasher was last advanced to (the upload's recorded offset).
    var position: Int64 { condition.withLock { target } }

    /// Bytes up to `offset` are verified and on file: hash them.
    func advance(to offset: Int64) {
        condition.withLock {
            target = offset
            condition.broadcast()
        }
    }

    /// Waits until every byte up to `length` is hashed; the digest, or nil if reading failed.
    func finish(length: Int64) -> SHA256Digest? {
        advance(to: length)
        condition.lock()
        while hashed < length && !failed && !exited { condition.wait() }
        let ok = hashed == length && !failed
        stopped = true
        condition.broadcast()
        while !exited { condition.wait() }
        condition.unlock()
        return ok ? hasher.finish() : nil
    }

    /// Ends the thread without a result.
    func cancel() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    private func run(path: String) {
        defer { condition.withLock { exited = true; condition.broadcast() } }
        guard let fd = try? FileIO.open(path, O_RDONLY) else { condition.withLock { failed = true }; return }
        defer { FileIO.close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            condition.lock()
            while hashed >= target && !stopped { condition.wait() }
            if stopped && hashed >= target { condition.unlock(); return }
            if stopped && target > hashed { condition.unlock(); return }
            let start = hashed, end = target
            condition.unlock()
            var position = start
            while position < end {
                let want = Int(min(Int64(buffer.count), end - position))
                guard let n = try? FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: position), n > 0 else {
                    condition.withLock { failed = true; condition.broadcast() }
                    return
                }
                hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                position += Int64(n)
            }
            condition.withLock { hashed = end; condition.broadcast() }
        }
    }
}

/// The uploads being written right now (one PATCH per upload at a time) and their
/// trailing hashers. Each hasher is a thread and an open file, so at most `openLimit`
/// run at once: an idle one beyond that is closed, least recently used first, and an
/// upload without one gets a new one on its next PATCH (or, with none free, is read
/// once at its commit).
final class UploadTable: Sendable {
    private struct Slot {
        var busy = false
        var hasher: TrailingHasher?
        var lastUse: UInt64 = 0
    }
    private struct State {
        var slots: [String: Slot] = [:]
        var clock: UInt64 = 0
        /// Keys of the hashers handed out whose thread runs, less those evicted (their
        /// threads end on their own at once).
        var live: Set<Int> = []
        var nextKey = 0
    }
    private let state = Mutex(State())
    let openLimit: Int

    init(openLimit: Int) { self.openLimit = max(1, openLimit) }

    /// A new hasher for the staging file at `path`, caught up to `offset`; nil when
    /// `openLimit` hashers run already (the commit then reads the file once).
    func makeHasher(path: String, at offset: Int64) -> TrailingHasher? {
        let key = state.withLock { s -> Int? in
            if s.live.count >= openLimit { evictIdle(&s, keeping: openLimit - 1) }
            guard s.live.count < openLimit else { return nil }
            s.nextKey += 1
            s.live.insert(s.nextKey)
            return s.nextKey
        }
        guard let key else { return nil }
        let hasher = TrailingHasher(path: path, key: key) { [weak self] in self?.closed(key) }
        if offset > 0 { hasher.advance(to: offset) }
        return hasher
    }

    /// Hashers open now (tests, and the operator's view of the bound).
    var openHashers: Int { state.withLock { $0.live.count } }

    /// Uploads a request is writing now (a scrape's count: one pass over the table).
    var writing: Int { state.withLock { s in s.slots.values.reduce(0) { $0 + ($1.busy ? 1 : 0) } } }

    private func closed(_ key: Int) { _ = state.withLock { $0.live.remove(key) } }

    /// Cancels idle hashers, least recently used first, until at most `keeping` run.
    private func evictIdle(_ s: inout State, keeping: Int) {
        var excess = s.live.count - keeping
        guard excess > 0 else { return }
        let idle = s.slots.filter { !$0.value.busy && $0.value.hasher != nil }.sorted { $0.value.lastUse < $1.value.lastUse }
        for (id, slot) in idle where excess > 0 {
            guard let hasher = slot.hasher else { continue }
            hasher.cancel()
            s.live.remove(hasher.key)
            s.slots[id]?.hasher = nil
            excess -= 1
        }
    }

    /// Marks the upload busy. Returns nil when another request is writing it; otherwise
    /// the upload's trailing hasher, if one is kept (the caller checks its position).
    func claim(_ id: String) -> TrailingHasher?? {
        state.withLock { s in
            var slot = s.slots[id] ?? Slot()
            if slot.busy { return nil }
            slot.busy = true
            let hasher = slot.hasher
            slot.hasher = nil
            s.slots[id] = slot
            return .some(hasher)
        }
    }

    /// Ends a claim, keeping `hasher` for the next PATCH.
    func release(_ id: String, hasher: TrailingHasher?) {
        state.withLock { s in
            s.clock += 1
            s.slots[id] = Slot(busy: false, hasher: hasher, lastUse: s.clock)
        }
    }

    /// Forgets an upload (completed or terminated); the caller holds its claim.
    func remove(_ id: String) {
        _ = state.withLock { $0.slots.removeValue(forKey: id) }
    }

    /// Stops every kept hasher's thread (server stop).
    func cancelAll() {
        let all = state.withLock { s -> [TrailingHasher] in
            let hashers = s.slots.values.compactMap(\.hasher)
            s.slots.removeAll()
            return hashers
        }
        all.forEach { $0.cancel() }
    }
}
