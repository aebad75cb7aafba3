import Foundation
import Drive

/// Keeps pinned content local ("available offline", PinnedContent.swift): fetches the
/// blocks pinned files name and this device lacks, in the background, a batch at a
/// time, when woken (a pin set, a content brought down by the mirror) and every
/// `interval` seconds (what waited while paused, metered or offline).
final class PinFetcher: @unchecked Sendable {   // `woken` is guarded by `thread.condition`
    private let fs: DriveFileSystem
    private let interval: Double
    private let thread = BackgroundThread(name: "vd-pins")
    private var woken = false

    init(fs: DriveFileSystem, interval: Double) {
        self.fs = fs
        self.interval = interval
    }

    func start() {
        fs.pinsChanged = { [weak self] in self?.wake() }
        thread.start { [self] in
            while !waitForWork() {
                do {
                    let r = try fs.blockCache.fetchPinned()
                    if r.more && !r.stopped { wake() }
                } catch {
                    printError("pinned content could not be fetched: \(error); tried again in \(Int(interval)) s")
                }
            }
        }
    }

    func stop() { thread.stop() }

    func wake() {
        thread.condition.lock()
        woken = true
        thread.condition.broadcast()
        thread.condition.unlock()
    }

    /// Waits until woken or `interval` passed (the first pass runs at once); true when stopping.
    private var started = false
    private func waitForWork() -> Bool {
        thread.condition.lock()
        defer { thread.condition.unlock() }
        if !started { started = true; return thread.stopping }
        let deadline = Date().addingTimeInterval(interval)
        while !thread.stopping && !woken && Date() < deadline { _ = thread.condition.wait(until: deadline) }
        woken = false
        return thread.stopping
    }
}
