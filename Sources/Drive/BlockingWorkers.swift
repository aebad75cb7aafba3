import Foundation
import Storage

/// Runs jobs that block (on the network, the disk) on up to `limit` threads of its own,
/// in the order given. Dispatch's global pool is as wide as the machine has cores and
/// does not grow for work that blocks: on these 2-core machines at most two prefetches
/// ran at once behind a concurrent queue, and a sequential reader waited for nearly
/// every block (measured: 642 waits, 3.2 s in all, for a 1 GiB read).
///
/// Threads start when jobs wait and none is idle, and end after `idleSeconds` with
/// nothing to do, so a drive at rest (or a test's short-lived one) keeps none.
/// `@unchecked Sendable`: state is guarded by `work`.
final class BlockingWorkers: @unchecked Sendable {
    let name: String
    let limit: Int
    let idleSeconds: Double
    private let work = NSCondition()
    private var pending: [@Sendable () -> Void] = []
    private var threads = 0
    private var idle = 0

    init(name: String, limit: Int, idleSeconds: Double = 2) {
        self.name = name
        self.limit = limit
        self.idleSeconds = idleSeconds
    }

    /// Jobs waiting for a thread.
    var backlog: Int { work.withLock { pending.count } }

    /// Threads alive now (for tests).
    var threadCount: Int { work.withLock { threads } }

    func run(_ job: @escaping @Sendable () -> Void) {
        work.lock()
        defer { work.unlock() }
        pending.append(job)
        if idle > 0 {
            work.signal()
        } else if threads < limit {
            threads += 1
            Thread(named: name) { [self] in loop() }.start()
        }
    }

    private func loop() {
        work.lock()
        while true {
            if pending.isEmpty {
                idle += 1
                let woken = work.wait(until: Date(timeIntervalSinceNow: idleSeconds))
                idle -= 1
                if pending.isEmpty && !woken {
                    threads -= 1
                    work.unlock()
                    return
                }
                continue
            }
            let job = pending.removeFirst()
            work.unlock()
            job()
            work.lock()
        }
    }
}
