import Foundation
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The periodic garbage collection inside `vdrive serve`: every `interval` seconds
/// (`--gc-interval`; 0: never), the purge of the tree's trash (nodes deleted more than
/// `--trash-days` ago), then one collection with the configured grace. With several
/// processes on one PostgreSQL each runs the job; the collection's lock lets one sweep at
/// a time and the others skip that turn. At start it finishes what a killed run left
/// (their markers hold back uploads of those blocks until then).
final class CollectorJob: Sendable {
    private let collector: SpaceCollector
    private let interval: Int64
    private let grace: Int64
    private let trashDays: Int64
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let stopped = Mutex(false)
    private let metrics: ServerMetrics?

    init(collector: SpaceCollector, interval: Int64, grace: Int64, trashDays: Int64, metrics: ServerMetrics? = nil) {
        self.collector = collector; self.interval = interval; self.grace = grace; self.trashDays = trashDays; self.metrics = metrics
    }

    func start() {
        let thread = Thread(named: "vd-collector") { [self] in
            defer { done.signal() }
            do { try collector.finishLeftoversIfIdle() } catch { log("could not finish an interrupted collection: \(error)") }
            guard interval > 0 else { return }
            while !stopped.withLock({ $0 }) {
                if wake.wait(timeout: .now() + .seconds(Int(min(interval, Int64(Int32.max))))) == .success { break }
                do {
                    let purged = try collector.purgeTrash(days: trashDays)
                    if purged > 0 { log("purged \(purged) node(s) deleted more than \(trashDays) days ago from the workspace's trash") }
                } catch {
                    log("purging the workspace's trash failed: \(error); it runs again in \(interval) s")
                }
                do {
                    let r = try collector.collect(grace: grace)
                    metrics?.collected(r)
                    if r.blocks > 0 || r.contents > 0 || r.objects > 0 {
                        log("garbage collection removed \(r.contents) content(s), \(r.blocks) block(s) (\(r.bytes) bytes) and \(r.objects) orphan object(s) (\(r.objectBytes) bytes)")
                    }
                } catch is SpaceCollector.Busy {
                    metrics?.collected(SpaceCollector.Report())
                } catch {
                    metrics?.collected(nil)
                    log("garbage collection failed: \(error); it runs again in \(interval) s")
                }
            }
        }
        thread.name = "vdrive-gc"
        thread.start()
    }

    /// Wakes the job and waits for it (a sweep in progress runs to its end first).
    func stop() {
        guard stopped.withLock({ was in defer { was = true }; return !was }) else { return }
        wake.signal()
        done.wait()
    }

    private func log(_ text: String) {
        let line = "vdrive serve: \(text)\n"
        line.withCString { _ = write(2, $0, strlen($0)) }
    }
}
