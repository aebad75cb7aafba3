import Synchronization
import DeviceWiring

/// What a restore did so far, shared by its transfer threads: counts, the progress
/// line, the folders to sync at the end, and whether the server is gone. Failures are
/// printed as they happen (one line each) and only counted, so memory does not grow
/// with the number of files.
final class RestoreReport: Sendable {
    struct Tally {
        var restored = 0
        var alreadyThere = 0
        var downloaded: Int64 = 0
        var failed = 0
        var anyLocal = false
        var anyServer = false
        /// Set by the first `.serverGone`: the files after it are not tried.
        var serverGone = false
        /// Folders a file was renamed into: synced once at the end, so the names last.
        var folders: Set<String> = []
    }

    private let state: Mutex<(tally: Tally, progress: RestoreProgress)>

    init(progress: RestoreProgress) { state = Mutex((Tally(), progress)) }

    var tally: Tally { state.withLock { $0.tally } }
    var serverGone: Bool { state.withLock { $0.tally.serverGone } }

    func settled(_ bytes: Int64, fetched: Bool) {
        state.withLock { $0.progress.add(bytes, fetched: fetched) }
    }

    func alreadyThere(size: Int64) {
        state.withLock {
            $0.tally.alreadyThere += 1
            $0.progress.add(size, fetched: false)
            $0.progress.fileFinished()
        }
    }

    func restored(downloaded: Int64, folder: String) {
        state.withLock {
            $0.tally.restored += 1
            $0.tally.downloaded += downloaded
            $0.tally.folders.insert(folder)
            $0.progress.fileFinished()
        }
    }

    /// A file was not restored; `unsettled`: its bytes not counted in the progress yet.
    func failed(_ failure: RestoreFailure, unsettled: Int64) {
        state.withLock {
            $0.tally.failed += 1
            switch failure {
            case .local: $0.tally.anyLocal = true
            case .server: $0.tally.anyServer = true
            case .serverGone: $0.tally.serverGone = true
            case .transient: break
            }
            $0.progress.note("not restored: " + failure.message)
            $0.progress.add(unsettled, fetched: false)
            $0.progress.fileFinished()
        }
    }

    /// The listing broke off: `count` files counted in the first pass were not tried.
    func unlisted(_ count: Int) {
        state.withLock {
            $0.tally.failed += count
            $0.progress.note("not restored: \(count) file(s) not listed again (run the restore again)")
        }
    }

    func note(_ line: String) { state.withLock { $0.progress.note(line) } }

    func close() { state.withLock { $0.progress.close() } }

    /// 0 when nothing failed; a permanent failure's code when there is one (running
    /// again will not help); else 75, try again.
    var exitCode: Int32 {
        let t = tally
        if t.failed == 0 { return ExitCode.ok }
        if t.anyLocal { return ExitCode.cantCreate }
        if t.anyServer { return ExitCode.dataError }
        return ExitCode.tempFail
    }
}
