import Foundation
import Synchronization
import Crypto
import Drive
import Storage

/// What the mirror is doing, for the status file and `vdrive status`.
public struct MirrorStatus: Sendable, Equatable {
    /// Changes made here not on the server yet.
    public var waitingUp = 0
    /// Changes of the server not applied here yet.
    public var waitingDown = 0
    /// Conflict copies made since the mount started.
    public var conflicts = 0
    /// Files here whose last send failed and that still wait to go (each counted once,
    /// however often it was tried), and server changes that could not be applied.
    public var failures = 0
    /// The last failure, in words.
    public var lastProblem: String?
    /// The server could not be reached at the last try.
    public var offline = false
    /// The server has not answered the feed since the mirror started: what it holds is
    /// not known yet, so nothing is said to be up to date.
    public var connecting = false
    /// The workspace is over its quota: nothing new goes up until space is freed.
    public var serverFull = false
    /// Why content waits to go up now (paused, a metered network, the battery), or nil.
    public var held: String?
    /// Why the worker's last pass (else the feed's last request) failed, when the server
    /// answered but not as asked (a token refused, a server error): what the user may
    /// have to act on. Nil once each goes through again, and while the server cannot be
    /// reached (`offline` says that).
    public var passFailure: String?
}

/// Settings of the mirror (Docs/sync.md).
public struct MirrorSettings: Sendable {
    /// A change is sent once nothing changed for this long…
    public var quiet: Double = 0.2
    /// …or once it waited this long (a file rewritten all the time: about one send per period).
    public var most: Double = 1.0
    /// How long the server may hold the feed's request when nothing is new.
    public var hold: Int = 30
    /// Names never sent (shell globs): the built-in temporary names.
    public var excluded: [String] = MirrorRules.temporaryPatterns
    /// The user's patterns (`sync-exclude`): a name they match is not sent while its node
    /// was never synced; a node already synced keeps syncing (a pattern deletes nothing).
    public var userExcluded: [String] = []
    public init() {}
}

/// The mirror of the workspace on a mounted drive: follows the server's tree into the
/// catalog, and sends the drive's settled changes up (Docs/sync.md, "The device").
///
/// Two threads: the feed follower (a held request at a time: idle costs one request per
/// `hold`), and the worker, which applies what the feed brought and sends what the
/// journal marked, one pass at a time. State lives in the catalog's tables
/// (MirrorSchema.swift), so a kill at any point resumes from what was committed.
public final class MirrorEngine: @unchecked Sendable {   // mutable state under `state`'s lock
    let drive: DriveFileSystem
    let server: MirrorServer
    /// This device's name (for conflict copies), asked of `deviceName` once, when first needed.
    private let deviceName: @Sendable () -> String
    var device: String {
        if let known = state.withLock({ $0.device }) { return known }
        let name = deviceName()
        state.withLock { $0.device = name }
        return name
    }
    let settings: MirrorSettings
    let owner: (uid: UInt32, gid: UInt32)
    let blocks: StoredBlocks
    /// The mirror's own connections to the catalog database (its tables only), one per
    /// thread that uses them: a connection is used by one thread at a time (SQLite's
    /// no-mutex mode). `db` is the worker's (and `runOnce`'s), `feedDB` the feed
    /// follower's, `statusDB` (under `statusLock`) the status readers'.
    let db: Database
    let feedDB: Database
    private let statusDB: Database
    private let statusLock = NSLock()
    public let journal = MirrorJournal(refusesLinks: true)
    /// Told of contents brought down (MirrorArrivals.swift); nil: nothing is fetched ahead.
    let arrivals: MirrorArrivals?
    /// Why content may not go up now (`MirrorEngine.init`), or nil to send.
    let transferHold: (@Sendable () -> String?)?
    /// Told of the status after each pass of the worker, when it differs from the last
    /// one told: the mount keeps it in its state folder for `vdrive status`.
    private let statusChanged: (@Sendable (MirrorStatus) -> Void)?
    /// The status last given to `statusChanged`, and when it was last looked at (the
    /// worker's thread only).
    private var published: MirrorStatus?
    private var publishedAt: Int64 = 0

    struct State {
        var woken = false
        /// The feed brought changes: the server answers again, a pass backing off goes now.
        var serverSpoke = false
        var stopping = false
        var status = MirrorStatus(connecting: true)
        /// Inodes whose send failed: not tried again before `until` (seconds) unless
        /// changed here after the failure (`failedAt`, the mirror's clock): a file renamed
        /// away from a name the server refuses goes at once. Its inodes still dirty are the
        /// failures the status counts.
        /// `why`: the failure's text, the file's `user.vdrive.sync-error`.
        var retryAfter: [UInt64: (until: Double, failedAt: Int64, why: String)] = [:]
        var fullUntil: Double = 0
        /// Name clashes of one inode in a row (a swap of two names needs two passes).
        var clashes: [UInt64: Int] = [:]
        var contentMissing: Set<UInt64> = []
        /// Inodes whose content the server lacked while transfers were held, with the
        /// pass's clock then: not planned again until the hold ends or they change.
        var heldContent: [UInt64: Int64] = [:]
        /// Server changes that could not be applied at their last try, and why.
        var unapplied: [String: String] = [:]
        var device: String?
        /// Why the worker's last pass, and the feed's last request, failed with the server
        /// answering (`MirrorStatus.passFailure`); each cleared by its own next success.
        var workFailure: String?
        var feedFailure: String?
    }
    let state = Mutex(State())
    private let signal = NSCondition()
    private var threads: [Thread] = []
    /// Signalled by each thread as it ends (`stop` waits for both).
    private let ended = DispatchSemaphore(value: 0)

    public init(drive: DriveFileSystem, server: MirrorServer, device: @escaping @Sendable () -> String,
                settings: MirrorSettings = MirrorSettings(), arrivals: MirrorArrivals? = nil,
                statusChanged: (@Sendable (MirrorStatus) -> Void)? = nil, hold: (@Sendable () -> String?)? = nil) throws {
        self.drive = drive
        self.transferHold = hold
        self.arrivals = arrivals
        self.statusChanged = statusChanged
        self.server = server
        deviceName = device
        self.settings = settings
        owner = (getuid(), getgid())
        blocks = StoredBlocks(blobs: drive.blobStore, catalogPath: drive.catalogPath)
        db = try Database(path: drive.catalogPath)
        feedDB = try Database(path: drive.catalogPath)
        statusDB = try Database(path: drive.catalogPath)
        // As the drive's own connection: in WAL mode a commit skips its fsync and what a
        // power loss takes is the newest commits of the one log, the drive's and the
        // mirror's alike, in order (the mirror then sends again what it cannot prove was
        // taken, and the server answers a change it already applied as applied).
        // The WAL is checkpointed by the drive's flusher on a connection of its own; with
        // SQLite's default (1,000 pages) each of the mirror's commits during a large copy
        // copied the WAL into the database itself, under the drive's writes. Here only a
        // backstop, as on the drive's connection.
        for c in [db, feedDB, statusDB] { try c.execute("PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint = 16000") }
        journal.wake = { [weak self] in self?.wake() }
        drive.addFollower(journal)
    }

    /// Why the last send of `ino` failed, while it waits to be tried again; nil when it
    /// did not fail (a file changed or sent since is no longer failing: the caller checks
    /// that it still waits, as `MirrorFileState.of` does).
    public func failure(of ino: UInt64) -> String? { state.withLock { $0.retryAfter[ino]?.why } }

    /// Runs `body` on the status readers' connection (any thread).
    func onStatusConnection<T>(_ body: (Database) throws -> T) rethrows -> T {
        try statusLock.withLock { try body(statusDB) }
    }

    public var status: MirrorStatus {
        let (status, failing) = state.withLock { s in
            var status = s.status
            status.passFailure = s.workFailure ?? s.feedFailure
            status.failures = s.unapplied.count
            if status.lastProblem == nil { status.lastProblem = s.unapplied.values.first }
            return (status, Array(s.retryAfter.keys))
        }
        var s = status
        let stored = statusLock.withLock { try? MirrorStatus.stored(in: statusDB, failing: failing) }
        s.waitingUp = stored?.waitingUp ?? 0
        s.waitingDown = stored?.waitingDown ?? 0
        s.failures += stored?.failures ?? 0
        return s
    }

    public func start() {
        do { try scanIfNew() } catch { MirrorLog.error("the first look at the local workspace failed: \(error)") }
        do { try rescanIfRulesChanged() } catch { MirrorLog.error("the look at the local workspace under the new sync-exclude patterns failed: \(error)") }
        let feed = Thread(named: "vd-mirror-feed") { [weak self] in self?.followFeed(); self?.ended.signal() }
        let worker = Thread(named: "vd-mirror") { [weak self] in self?.work(); self?.ended.signal() }
        threads = [feed, worker]
        for t in threads { t.start() }
    }

    /// Stops both threads and waits for them: a held feed request and a content being sent
    /// are given up within about a second (the next pass resumes the content where the
    /// server has it). The journal stays: changes made until the drive stops are marked.
    public func stop() {
        state.withLock { $0.stopping = true }
        signal.lock(); signal.broadcast(); signal.unlock()
        for _ in threads { ended.wait() }
        threads = []
    }

    var stopping: Bool { state.withLock { $0.stopping } }

    /// `stopping` for a server call to ask while it waits (true once the engine is gone).
    var stopAsked: @Sendable () -> Bool { { [weak self] in self?.stopping ?? true } }

    /// One transaction of the mirror's own rows on `connection` (its worker's by default),
    /// with the drive's changes held (`DriveFileSystem.holdingChanges`).
    func write<T>(on connection: Database? = nil, _ body: () throws -> T) throws -> T {
        let c = connection ?? db
        return try drive.holdingChanges { try c.transaction(body) }
    }

    func wake() {
        signal.lock()
        state.withLock { $0.woken = true }
        signal.signal()
        signal.unlock()
    }

    /// Waits until woken or `seconds` passed.
    func pause(_ seconds: Double) { waitOnSignal(seconds) { $0.woken } }

    /// Sleeps `seconds`, or until the mirror stops: the feed's pauses between failed
    /// requests (up to 30 s) must not hold an unmount. Leaves the worker's wakes alone.
    func sleepUnlessStopping(_ seconds: Double) {
        signal.lock()
        defer { signal.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while !stopping {
            if !signal.wait(until: deadline) { break }
        }
    }

    /// Waits until `seconds` passed, the mirror stops or `ends` holds, then forgets the
    /// wakes meanwhile (the pass that follows sees every change they were for).
    private func waitOnSignal(_ seconds: Double, until ends: (State) -> Bool) {
        signal.lock()
        defer { signal.unlock() }
        let deadline = Date(timeIntervalSinceNow: seconds)
        while !state.withLock({ $0.stopping || ends($0) }) {
            if !signal.wait(until: deadline) { break }
        }
        state.withLock { $0.woken = false }
    }

    private func work() {
        var failures = 0
        while !stopping {
            var next = 1.0
            do {
                let more = try applyRemote()
                let (wait, sent) = try sendLocal(force: false)
                next = more ? min(wait, 0.01) : wait
                if sent { sleepUnlessStopping(Self.passGap) }
                failures = 0
                state.withLock {
                    $0.status.offline = false
                    $0.workFailure = nil
                }
            } catch {
                if stopping { break }
                failures += 1
                noteProblem(error, fromFeed: false)
                _ = publishStatus(force: true)
                backOff(min(30, 0.5 * Double(1 << min(failures, 6))))
                continue
            }
            pause(min(next, publishStatus(force: false)))
        }
    }

    /// After a pass that sent changes, the least time before the next one, whatever the
    /// journal's wakes meanwhile: they gather into the next slice. Without it, a copy
    /// into the drive woke a pass for every few files once the server answered quickly:
    /// 300 slices of 30-40 files for 10,000 files, each a block pack, a batch of tree
    /// changes, a page of every other device's feed and a fetch there; with 60 ms, 36
    /// slices, and the copy's CPU across the mounts and the server 9.6-10.2 s instead of
    /// 12.5-15.1 s (Docs/benchmarks.md, "Bulk: the server's pack files, and a gap between
    /// passes"). A lone change is sent at once (it follows no sending pass); a copy's last
    /// files wait at most this much more.
    static let passGap = 0.06

    /// How often at most the status is looked at for `statusChanged` while passes follow
    /// each other (a large copy wakes the worker for each file): each look counts the
    /// waiting rows, and a changed line is a file written. Seconds.
    static let publishInterval = 0.5

    /// Tells `statusChanged` of the status when it changed since the last time; within
    /// `publishInterval` of the last look, later: returns how long until then (the worker
    /// comes back by then), else infinity. Every change of the status (a mark of the
    /// journal, the feed's changes, the server gone or back) wakes this thread for a pass,
    /// so the last status told is the current one.
    private func publishStatus(force: Bool) -> Double {
        guard let statusChanged else { return .infinity }
        let clock = MirrorClock.nanoseconds()
        let since = Double(clock - publishedAt) / 1e9
        if !force, since >= 0, since < Self.publishInterval { return Self.publishInterval - since }
        publishedAt = clock
        let now = status
        guard now != published else { return .infinity }
        published = now
        statusChanged(now)
        return .infinity
    }

    /// After a failed pass: waits out `seconds` whatever the drive changes meanwhile. A
    /// local change does not bring the server back, and a pass plans every waiting
    /// change again: woken by each file of a copy into an offline drive, the passes cost
    /// CPU quadratic in the files copied (a copy of 10,000 files: 17-21 CPU-s, now 7-15).
    /// Changes the feed brings end the wait: the server answers again.
    func backOff(_ seconds: Double) {
        state.withLock { $0.serverSpoke = false }
        waitOnSignal(seconds) { $0.serverSpoke }
    }

    /// Brings the catalog up to date both ways without waiting (the task run without a
    /// mount, and tests): pages until the feed's end, every change applied and sent, until
    /// a pass finds nothing to do (at most `passes`).
    public func runOnce(passes: Int = 20) throws {
        try scanIfNew()
        try rescanIfRulesChanged()
        while try pullPage(wait: 0) {}
        for _ in 0..<passes {
            try applyRemote(budget: .infinity)
            _ = try sendLocal(force: true)
            while try pullPage(wait: 0) {}
            let idle = try db.queryOne("SELECT (SELECT count(*) FROM mirror_dirty) + (SELECT count(*) FROM mirror_remote)") { $0.int64(0) } ?? 0
            if idle == 0 { return }
        }
    }

    func noteProblem(_ error: Error, fromFeed: Bool) {
        let text = "\(error)"
        let first = state.withLock { s -> Bool in
            let first = s.status.lastProblem != text
            s.status.lastProblem = text
            s.status.offline = MirrorLog.isUnreachable(error)
            let failure = s.status.offline ? nil : text
            if fromFeed { s.feedFailure = failure } else { s.workFailure = failure }
            return first
        }
        if first {
            MirrorLog.error("the workspace mirror: \(text)")
            wake()   // the worker publishes the status (the feed's thread does not)
        }
    }

    /// A drive that had files before the mirror existed (or a state folder the mirror
    /// never saw): every name outside the Camera Roll is marked once, so it is sent. A
    /// new device with an empty drive marks nothing and deletes nothing: it receives.
    func scanIfNew() throws {
        if try MirrorRows.state("scanned", in: db) == "1" { return }
        let marked = try everyInode()
        let now = MirrorClock.nanoseconds()
        try write {
            for ino in marked where try MirrorRows.synced(ino: ino, in: db) == nil { try MirrorRows.markDirty(ino, now: now, in: db) }
            try MirrorRows.setState("scanned", "1", in: db)
            try MirrorRows.setState("excluded", rulesKey, in: db)
        }
    }

    /// The user's patterns changed since the last start (`sync-exclude`): every name is
    /// marked, so each pass plans it under the new rules: a name no pattern keeps back
    /// any more goes up; the others are found as they were and cost a comparison (a
    /// synced node a new pattern matches keeps syncing: `leftOutByUser`).
    func rescanIfRulesChanged() throws {
        let last = try MirrorRows.state("excluded", in: db)
        if last == rulesKey { return }
        // Before the patterns were recorded, a mirror ran with the built-in ones.
        if last == nil && settings.userExcluded.isEmpty {
            try write { try MirrorRows.setState("excluded", rulesKey, in: db) }
            return
        }
        let marked = try everyInode()
        let now = MirrorClock.nanoseconds()
        try write {
            for ino in marked { try MirrorRows.markDirty(ino, now: now, in: db) }
            try MirrorRows.setState("excluded", rulesKey, in: db)
        }
    }

    /// The user's exclusion patterns as recorded in the mirror's state.
    private var rulesKey: String { settings.userExcluded.joined(separator: "\n") }

    /// Every committed inode of the drive outside the Camera Roll.
    private func everyInode() throws -> [UInt64] {
        var marked: [UInt64] = []
        var folders: [UInt64] = [1]
        while let folder = folders.popLast() {
            for e in try drive.committedEntries(in: folder) {
                if folder == 1 && e.name == Array(MirrorRules.cameraRoll.utf8) { continue }
                marked.append(e.ino)
                if e.kind == .folder { folders.append(e.ino) }
            }
        }
        return marked
    }
}

enum MirrorLog {
    static func error(_ text: String) { LogLine.write("vdrive: " + text) }
    static func isUnreachable(_ error: Error) -> Bool { (error as? MirrorUnreachable) != nil }
}

/// Thrown by a `MirrorServer` when the server cannot be reached (offline, not a failure of a change).
public struct MirrorUnreachable: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Thrown by a `MirrorServer` when the workspace is over its quota: nothing new goes up
/// until space is freed.
public struct MirrorServerFull: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A problem that needs the user, or a server answer that cannot be used.
public struct MirrorRefusal: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
