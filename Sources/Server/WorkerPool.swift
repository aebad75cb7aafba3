import Foundation
import Storage

/// A fixed set of threads that run the blocking part of requests (records, the object
/// store, fsync, hashing a completed block) while libmicrohttpd's pool threads go on
/// serving other connections. At most `size` jobs run at once; more wait in order.
/// `@unchecked Sendable`: `jobs` and `stopped` are guarded by `condition`.
final class WorkerPool: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var stopped = false
    private var running = 0
    private var threads: [Thread] = []

    init(size: Int, name: String) {
        for i in 0..<max(1, size) {
            let thread = Thread(named: "\(name)-\(i)", stackSize: 1 << 20) { [self] in loop() }
            threads.append(thread)
            thread.start()
        }
    }

    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.withLock {
            jobs.append(job)
            condition.signal()
        }
    }

    /// Runs the queued jobs, then ends the threads; returns when they have ended.
    func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
            while running > 0 || head < jobs.count { condition.wait() }
        }
    }

    private func loop() {
        condition.lock()
        running += 1
        while true {
            while head == jobs.count && !stopped { condition.wait() }
            if head == jobs.count {
                running -= 1
                condition.broadcast()
                condition.unlock()
                return
            }
            let job = jobs[head]
            head += 1
            if head == jobs.count { jobs.removeAll(keepingCapacity: true); head = 0 }
            condition.unlock()
            job()
            condition.lock()
        }
    }
}
