import Foundation
import Storage

/// One named thread running a loop until it is stopped: the drive's flusher, its group
/// committer, the records follower and the cache bound. The loop keeps its own state
/// under `condition` (so a wake-up and the stop flag are one lock) and returns once it
/// sees `stopping`; `stop()` raises the flag, wakes the loop and waits until it returned.
///
/// `@unchecked Sendable`: `stopping` is guarded by `condition`; `finished` is set by
/// `start` and `stop`, which the owner calls in turn from one thread.
public final class BackgroundThread: @unchecked Sendable {
    public let condition = NSCondition()
    /// Read with `condition` locked.
    public private(set) var stopping = false
    private let name: String
    private var finished: DispatchSemaphore?

    public init(name: String) { self.name = name }

    /// Runs `loop` on a new thread.
    public func start(_ loop: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        finished = done
        Thread(named: name) { loop(); done.signal() }.start()
    }

    /// Raises the flag, wakes the loop and waits until it has returned. Never call it
    /// from the loop itself.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
        finished?.wait()
        finished = nil
    }

    /// Waits out `seconds` unless stopped first (a wake-up before the deadline does not
    /// end the wait); true when stopping. Call it with `condition` unlocked.
    public func pause(_ seconds: Double) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(seconds)
        while !stopping && Date() < deadline { _ = condition.wait(until: deadline) }
        return stopping
    }
}
