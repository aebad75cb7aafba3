import Foundation
import Storage
import Synchronization

/// The two scheduled tasks of camera-roll backup.
public enum BackupTask: String, Sendable, CaseIterable {
    /// Drain the queue.
    case backup = "us.virtualdrive.backup"
    /// Refresh the watermark, dedup knowledge and file records with the server.
    case sync = "us.virtualdrive.sync"
}

/// Runs backup in the background of the mount process, on a thread of its own.
///
/// The thread sleeps on a `WakeSignal` (no polling) and wakes for: `wake()` (the drive
/// committed a camera-roll file), a settings change (inotify on the settings folder, or
/// `settingsChanged()`), the end of a backoff, a held policy's re-check (every
/// `holdRecheckInterval` while metered/battery holds, never while off or paused), and
/// the sync interval. `stop()` is quick: the PATCHes in flight are cancelled from their
/// progress callbacks, their items go back to pending, the server keeps their offsets.
public final class BackupEngine: Sendable {
    public struct Configuration: Sendable {
        /// The drive's catalog database (the engine opens its own connection to it).
        public var databasePath: String
        /// Where `backup.lock`, `status` and `status.json` live.
        public var stateFolder: String
        /// `$XDG_CONFIG_HOME/vdrive/settings.json`.
        public var settingsPath: String
        public var uploader = UploaderConfiguration()
        public var holdRecheckInterval: Double = 60
        public var syncInterval: Double = 3600
        /// Least time between two status.json writes while bytes flow.
        public var statusInterval: Double = 1
        /// How long `stop()` waits for the thread before returning anyway.
        public var stopTimeout: Double = 5

        public init(databasePath: String, stateFolder: String, settingsPath: String) {
            self.databasePath = databasePath; self.stateFolder = stateFolder; self.settingsPath = settingsPath
        }
    }

    private struct Shared {
        var settings = BackupSettings()
        var stopRequested = false
        var status = BackupStatus(state: .off)
        var lastStatusWrite: Double = -.infinity
        var started = false
        var watchers: [FileChangeWatcher] = []
        var lastError: String?
    }

    public let configuration: Configuration
    private let transport: BackupTransport
    private let blobs: BackupBlobSource
    private let policy: BackupPolicy
    private let shared = Mutex(Shared())
    private let signal = WakeSignal()
    private let exited = DispatchSemaphore(value: 0)

    public init(configuration: Configuration, transport: BackupTransport, blobs: BackupBlobSource,
                policy: BackupPolicy = BackupPolicy()) {
        self.configuration = configuration
        self.transport = transport
        self.blobs = blobs
        self.policy = policy
    }

    // MARK: - Control (any thread)

    /// Starts the engine thread and the settings watcher. Throws when the settings file
    /// is unreadable or the database cannot be opened. An engine runs once: after
    /// `stop()`, make a new one. The journal mode is the drive's business (WAL).
    public func start() throws {
        let db = try Self.openConnection(configuration.databasePath)
        // Watch first, then read: a change in between is not lost.
        var watchers = [try FileChangeWatcher(path: configuration.settingsPath) { [weak self] in self?.settingsChanged() }]
        let settings: BackupSettings
        do {
            // `vdrive backup retry` and other processes nudge a running engine through this file.
            watchers.append(try FileChangeWatcher(path: Self.nudgePath(stateFolder: configuration.stateFolder)) { [weak self] in
                self?.wake()
            })
            settings = try SettingsFile(path: configuration.settingsPath).load()
        } catch {
            watchers.forEach { $0.stop() }
            throw error
        }
        let alreadyStarted = shared.withLock { state -> Bool in
            if state.started { return true }
            state.started = true
            state.settings = settings
            state.watchers = watchers
            return false
        }
        if alreadyStarted { watchers.forEach { $0.stop() }; return }
        // `Database` is @unchecked Sendable: from here on only the engine thread uses it.
        Thread(named: "vd-backup") { [self] in
            run(db: db)
            exited.signal()
        }.start()
    }

    /// Something may be due: call after a camera-roll commit's transaction committed.
    public func wake() { signal.signal() }

    static func nudgePath(stateFolder: String) -> String { stateFolder + "/backup.wake" }

    /// Wakes the engine of a running mount from another process (after `vdrive backup
    /// retry`): the engine watches this file. Harmless when no engine runs.
    public static func nudge(stateFolder: String) throws {
        try AtomicFile.write(Data("\(getpid())\n".utf8), to: nudgePath(stateFolder: stateFolder), durable: false)
    }

    /// Re-reads the settings file (the watcher calls this; the mount may too).
    public func settingsChanged() {
        guard let settings = try? SettingsFile(path: configuration.settingsPath).load() else { return }
        shared.withLock { $0.settings = settings }
        policy.refresh()
        signal.signal()
    }

    /// Stops the engine: cancels the PATCHes in flight at their next progress tick, puts
    /// their items back to pending and returns within `stopTimeout` seconds in any case.
    /// Returns true when the engine thread has finished (false: it was still inside a
    /// transport call that ignores cancellation; it exits with the process).
    @discardableResult
    public func stop() -> Bool {
        let (wasStarted, watchers) = shared.withLock { state -> (Bool, [FileChangeWatcher]) in
            state.stopRequested = true
            defer { state.watchers = [] }
            return (state.started, state.watchers)
        }
        watchers.forEach { $0.stop() }
        signal.signal()
        guard wasStarted else { return true }
        if exited.wait(timeout: .now() + configuration.stopTimeout) == .success {
            exited.signal()  // a second stop() returns at once
            return true
        }
        return false
    }

    /// The latest status (for `.backup/status` and `.backup/status.json` on the mount).
    public func status() -> BackupStatus { shared.withLock { $0.status } }

    // MARK: - One task without a mount (`vdrive task run <id>`)

    public struct TaskReport: Sendable, Equatable {
        public var task: BackupTask
        /// The hold that stopped the task early, if any.
        public var hold: BackupHold?
        /// Another process was uploading: this run did nothing.
        public var busy = false
        public var sent = 0, linked = 0, failed = 0, retrying = 0
        public var status: BackupStatus
    }

    /// Runs one task to completion on the calling thread and writes the status files.
    /// `backup` drains what is due now (it does not sleep through backoffs); `sync` asks
    /// the server what it has and pushes records and the cursor.
    public static func runOnce(task: BackupTask, configuration: Configuration, transport: BackupTransport,
                               blobs: BackupBlobSource, policy: BackupPolicy = BackupPolicy()) throws -> TaskReport {
        let settings = try SettingsFile(path: configuration.settingsPath).load()
        let db = try openConnection(configuration.databasePath)
        let worker = BackupWorker(db: db, transport: transport, blobs: blobs, stateFolder: configuration.stateFolder,
                                  uploader: configuration.uploader, settings: { settings }, policy: policy,
                                  shouldContinue: { true })
        var report = TaskReport(task: task, status: BackupStatus(state: .off))
        switch task {
        case .sync:
            _ = try worker.sync()
        case .backup:
            if let hold = worker.currentHold() {
                report.hold = hold
            } else {
                let result = try worker.drain { _, outcome in report.count(outcome) }
                switch result {
                case .busy: report.busy = true
                case .held(let hold): report.hold = hold
                case .empty, .stopped: break
                }
                worker.releaseLock()
                if !report.busy { _ = try? worker.pushWatermark() }
            }
        }
        let phase: BackupWorker.Phase = report.hold.map { .held($0) } ?? (report.busy ? .busy : .resting)
        report.status = try worker.status(phase)
        try? StatusFile(stateFolder: configuration.stateFolder).write(report.status)
        return report
    }

    /// The engine's own connection to the catalog. `synchronous=NORMAL` (this connection
    /// only; the drive keeps its own setting): in WAL mode a commit then skips its fsync.
    /// A power cut may lose the last few backup writes, never consistency, and each lost
    /// write is redone safely (the server's offset and `.present` answer decide), while
    /// an fsync per 4 MiB block would add a disk flush to every block sent for no safety.
    static func openConnection(_ path: String) throws -> Database {
        let db = try Database(path: path)
        try db.execute("PRAGMA synchronous=NORMAL")
        // Pages through the kernel's mapping rather than a pread each: the queue is read
        // after every item. Bounded, since mapped pages count in the mount's RSS.
        try db.execute("PRAGMA mmap_size = 67108864")
        try db.execute("PRAGMA cache_size = -16000")
        try BackupSchema.apply(to: db)
        return db
    }

    // MARK: - The engine thread

    private func run(db: Database) {
        var nextSync = Clock.now()
        let worker = BackupWorker(
            db: db, transport: transport, blobs: blobs, stateFolder: configuration.stateFolder,
            uploader: configuration.uploader,
            settings: { [self] in shared.withLock { $0.settings } },
            policy: policy,
            shouldContinue: { [self] in shared.withLock { !$0.stopRequested && !$0.settings.paused } },
            onProgress: { [self] worker in publish(worker, .uploading, force: false) })
        while !shared.withLock({ $0.stopRequested }) {
            var deadline: Date?
            do {
                deadline = try step(worker, nextSync: &nextSync)
            } catch {
                // A database error (disk full, busy for long): say so and try again later.
                shared.withLock { $0.lastError = "\(error)" }
                deadline = Date(timeIntervalSinceNow: 30)
            }
            if shared.withLock({ $0.stopRequested }) { break }
            signal.wait(until: deadline)
        }
        worker.releaseLock()
        publish(worker, .stopped, force: true)
    }

    /// One round of the loop; returns when to wake up next if nothing signals (nil: never).
    private func step(_ worker: BackupWorker, nextSync: inout Double) throws -> Date? {
        if let hold = worker.currentHold() {
            worker.releaseLock()
            publish(worker, .held(hold), force: true)
            switch hold {
            case .off, .paused: return nil  // only a settings change can lift these
            case .meteredNetwork, .batteryLow:
                policy.refresh()
                return Date(timeIntervalSinceNow: configuration.holdRecheckInterval)
            }
        }
        if Clock.now() >= nextSync {
            do {
                _ = try worker.sync()
                shared.withLock { $0.lastError = nil }
                nextSync = Clock.now() + configuration.syncInterval
            } catch {
                shared.withLock { $0.lastError = "sync: \(error)" }
                nextSync = Clock.now() + configuration.uploader.retry.delay(afterAttempt: 3, random: Double.random(in: 0..<1))
            }
        }
        publish(worker, .uploading, force: true)
        let result = try worker.drain { [self] _, _ in publish(worker, .uploading, force: false) }
        switch result {
        case .stopped:
            return Date()  // stop, or a pause that cancelled a PATCH: the loop re-evaluates
        case .held(let hold):
            publish(worker, .held(hold), force: true)
            return Date()  // re-evaluate at once: the loop above decides how to wait
        case .busy:
            publish(worker, .busy, force: true)
            return Date(timeIntervalSinceNow: 30)
        case .empty(let nextDue):
            _ = try? worker.pushRecords()
            _ = try? worker.pushWatermark()
            worker.releaseLock()
            publish(worker, .resting, force: true)
            let wake = min(nextDue ?? .infinity, nextSync)
            return Date(timeIntervalSince1970: wake)
        }
    }

    /// Recomputes the status and writes the status files; at most once per
    /// `statusInterval` unless `force` (a change of state).
    private func publish(_ worker: BackupWorker, _ phase: BackupWorker.Phase, force: Bool) {
        let now = Clock.monotonic()
        let due = shared.withLock { force || now - $0.lastStatusWrite >= configuration.statusInterval }
        guard due, var status = try? worker.status(phase) else { return }
        shared.withLock {
            status.lastError = $0.lastError ?? status.lastError
            $0.status = status
            $0.lastStatusWrite = now
        }
        try? StatusFile(stateFolder: configuration.stateFolder).write(status)
    }
}

extension BackupEngine.TaskReport {
    mutating func count(_ outcome: UploadOutcome) {
        switch outcome {
        case .sent: sent += 1
        case .linked: linked += 1
        case .failed: failed += 1
        case .retry, .serverFull: retrying += 1
        case .held, .stopped, .superseded: break
        }
    }
}
