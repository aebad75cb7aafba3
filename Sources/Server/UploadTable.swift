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

    init(path: String) {
        Thread { [self] in run(path: path) }.start()
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

/// The uploads being written right now (one PATCH per upload at a time) and their trailing hashers.
final class UploadTable: Sendable {
    private struct Slot {
        var busy = false
        var hasher: TrailingHasher?
    }
    private let slots = Mutex<[String: Slot]>([:])

    /// Marks the upload busy. Returns nil when another request is writing it; otherwise
    /// the upload's trailing hasher, if one is kept (the caller checks its position).
    func claim(_ id: String) -> TrailingHasher?? {
        slots.withLock { table in
            var slot = table[id] ?? Slot()
            if slot.busy { return nil }
            slot.busy = true
            let hasher = slot.hasher
            slot.hasher = nil
            table[id] = slot
            return .some(hasher)
        }
    }

    /// Ends a claim, keeping `hasher` for the next PATCH.
    func release(_ id: String, hasher: TrailingHasher?) {
        slots.withLock { table in table[id] = Slot(busy: false, hasher: hasher) }
    }

    /// Forgets an upload (completed or terminated); the caller holds its claim.
    func remove(_ id: String) {
        _ = slots.withLock { $0.removeValue(forKey: id) }
    }

    /// Stops every kept hasher's thread (server stop).
    func cancelAll() {
        let all = slots.withLock { table -> [TrailingHasher] in
            let hashers = table.values.compactMap(\.hasher)
            table.removeAll()
            return hashers
        }
        all.forEach { $0.cancel() }
    }
}
