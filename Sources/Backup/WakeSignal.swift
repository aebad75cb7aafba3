import Foundation

/// A sticky wake-up for one waiting thread: `signal()` before `wait` is not lost.
/// The waiter sleeps in the kernel (a condition variable) until signalled or until its
/// deadline: no polling, so an idle engine costs no CPU.
/// `@unchecked Sendable`: `pending` is only touched with `condition` locked.
final class WakeSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var pending = false

    func signal() {
        condition.lock()
        pending = true
        condition.signal()
        condition.unlock()
    }

    /// Returns when signalled (true) or at `deadline` (false); nil deadline: no timeout.
    @discardableResult
    func wait(until deadline: Date?) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while !pending {
            if let deadline {
                if !condition.wait(until: deadline) && !pending { return false }
            } else {
                condition.wait()
            }
        }
        pending = false
        return true
    }
}
