import Crypto
import Synchronization

/// A SHA-256 of an upload's bytes from 0 to `position`, kept between PATCHes so the
/// final whole-blob check does not read the file back when the upload was sequential.
/// `@unchecked Sendable`: used by one PATCH at a time; handed over under `UploadTable`'s mutex.
final class RunningHash: @unchecked Sendable {
    let hasher = SHA256Hasher()
    var position: Int64 = 0
}

/// The uploads being written right now (one PATCH per upload at a time) and their running hashes.
final class UploadTable: Sendable {
    private struct Slot {
        var busy = false
        var running: RunningHash?
    }
    private let slots = Mutex<[String: Slot]>([:])

    /// Marks the upload busy. Returns nil when another request is writing it; otherwise
    /// the running hash, if one is kept (the caller checks its position).
    func claim(_ id: String) -> RunningHash?? {
        slots.withLock { table in
            var slot = table[id] ?? Slot()
            if slot.busy { return nil }
            slot.busy = true
            let running = slot.running
            slot.running = nil
            table[id] = slot
            return .some(running)
        }
    }

    /// Ends a claim, keeping `running` for the next PATCH.
    func release(_ id: String, running: RunningHash?) {
        slots.withLock { table in table[id] = Slot(busy: false, running: running) }
    }

    /// Forgets an upload (completed or terminated); the caller holds its claim.
    func remove(_ id: String) {
        _ = slots.withLock { $0.removeValue(forKey: id) }
    }
}
