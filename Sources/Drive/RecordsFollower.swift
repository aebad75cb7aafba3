import Foundation

/// Keeps the records table up to date with the server: at start it reads the feed
/// from the stored cursor to its end (the first mount: every version the server
/// keeps), then follows it. Each page is applied in one transaction with the `Backups/`
/// rows it changes. An unreachable server is one log line per outage; the table keeps
/// serving the last known records.
///
/// How it hears that the feed moved, two ways (`start(watch:)`):
/// - `.ownRequest`: it holds a request of its own on the feed (a long poll: an idle drive
///   asks once per `hold`, and hears of a change as it commits);
/// - `.told`: another held request of the same device watches the feed for it, with the
///   cursor `knownEnd` gives, and calls `feedEnds(at:)` with the end it saw; the follower
///   then reads the feed without holding until it reached that end. One held request per
///   device then serves two feeds. A server that does not say where the feed ends
///   (`feedEnds(at: nil)`) turns the follower back to its own request.
///
/// `@unchecked Sendable`: `outage` is used only by the follower's thread; the rest of the
/// mutable state is guarded by `follower.condition`.
public final class RecordsFollower: @unchecked Sendable {
    private let table: RecordsTable
    private let remote: RemoteRecords
    private let interval: Double
    private let follower = BackgroundThread(name: "vd-records")
    private var outage = false

    /// How the follower hears that the feed moved.
    public enum Watch: Sendable {
        /// A held request of its own on the feed.
        case ownRequest
        /// `feedEnds(at:)`, called by whoever holds a request that watches the feed.
        case told
    }

    // Guarded by `follower.condition`.
    private var watch = Watch.ownRequest
    /// The cursor after the last catch-up, or an end it was told of and has reached.
    private var end: Int64
    /// An end it was told of and has not reached yet.
    private var told: Int64?
    /// Told of an end since the catch-up in progress began (or since the last one).
    private var woken = false

    public init(table: RecordsTable, remote: RemoteRecords, interval: Double = 1.0) {
        self.table = table
        self.remote = remote
        self.interval = interval
        end = (try? table.cursor()) ?? 0
    }

    /// Reads the feed from the table's cursor to its end. Returns the files whose
    /// records changed. Used by the follower and by `vdrive task run us.virtualdrive.sync`.
    @discardableResult
    public static func catchUp(_ table: RecordsTable, from remote: RemoteRecords, pageSize: Int = 5_000, wait: Int = 0,
                               cancelled: @escaping @Sendable () -> Bool = { false }) throws -> Set<RecordKey> {
        var changed = Set<RecordKey>()
        var wait = wait   // the first request may be held; the pages after it are asked at once
        while true {
            let since = try table.cursor()
            let page = try remote.changes(since: since, limit: pageSize, wait: wait, cancelled: cancelled)
            wait = 0
            if let latest = page.latestSequence, since > latest {
                // The server forgot part of its feed (reset, or restored from an older
                // copy): what this drive learned may name versions it no longer has, and
                // versions it records now would sit below the cursor. Learn it all again.
                DriveLog.error("the workspace server's change feed ends at \(latest), before this drive's \(since) (was it reset, or restored from an older copy?): Backups/ is learned again from the start")
                changed.formUnion(try table.startOver())
                continue
            }
            if let workspace = page.workspace, let known = try table.workspace(), known != workspace {
                // Another workspace answers at this address (the drive was pointed at
                // another server, or this one was set up again): its records replace these.
                DriveLog.error("the workspace server now serves another workspace (\(workspace.prefix(8)), before \(known.prefix(8))): Backups/ is learned again from the start")
                changed.formUnion(try table.startOver())
                continue
            }
            if page.changes.isEmpty && page.nextSequence <= since { return changed }
            changed.formUnion(try table.apply(page))
            if page.changes.count < pageSize { return changed }
        }
    }

    /// Seconds the server may hold a request of the feed when nothing is new (a long
    /// poll, `.ownRequest`): an idle drive asks once per `hold`, and hears of a change as
    /// it commits.
    public var hold = 30

    /// Catches up at once, then follows the feed as `watch` says. A server that does not
    /// hold requests (it answers at once) is asked again every `interval`.
    public func start(watch: Watch = .ownRequest) {
        follower.condition.withLock { self.watch = watch }
        follower.start { [self] in
            var wait = 0
            while true {
                let started = Date()
                let brought = step(wait: wait)
                let (ownRequest, stopping) = follower.condition.withLock { (self.watch == .ownRequest, follower.stopping) }
                if stopping { return }
                if ownRequest {
                    wait = hold
                    let elapsed = Date().timeIntervalSince(started)
                    if follower.pause(brought == true || elapsed >= interval ? 0 : interval - elapsed) { return }
                } else {
                    wait = 0
                    // A failed catch-up is tried again (the end it was told of is not reached).
                    if brought == nil { if follower.pause(interval) { return } } else if !awaitTelling() { return }
                }
            }
        }
    }

    /// Stops the thread and waits for it (at most one request's timeout).
    public func stop() { follower.stop() }

    /// The end of the feed as this follower knows it (its cursor once caught up, or the
    /// end it was told of and is reading to): the cursor a request watching the feed for
    /// it carries.
    public var knownEnd: Int64 { follower.condition.withLock { told ?? end } }

    /// A request watching the feed saw where it ends (its highest sequence); another end
    /// than `knownEnd` (entries after it, or a reset server's shorter feed) makes the
    /// follower read the feed now. nil: that server does not say, so the follower goes
    /// back to a held request of its own.
    public func feedEnds(at latest: Int64?) {
        follower.condition.withLock {
            if let latest {
                if latest == (told ?? end) { return }
                told = latest
            } else {
                if watch == .ownRequest { return }
                watch = .ownRequest
                DriveLog.info("the workspace server does not watch Backups/' feed with the tree's: Backups/ holds a request of its own")
            }
            woken = true
            follower.condition.broadcast()
        }
    }

    /// Waits until told of a new end (or turned back to its own request); false when stopping.
    private func awaitTelling() -> Bool {
        follower.condition.withLock {
            while !woken && !follower.stopping && watch == .told { follower.condition.wait() }
            return !follower.stopping
        }
    }

    /// One catch-up; true when it brought something, nil when it failed.
    private func step(wait: Int) -> Bool? {
        let thread = follower
        // What it is told from now on may need another catch-up; what it was told before is reached by this one.
        let toldBefore = thread.condition.withLock { () -> Int64? in
            woken = false
            return told
        }
        do {
            let changed = try Self.catchUp(table, from: remote, wait: wait, cancelled: { thread.stopping })
            let cursor = try table.cursor()
            thread.condition.withLock {
                // Every entry up to an end it was told of before this catch-up was committed by
                // then, so this catch-up read it: that end is reached, even where no entry
                // bears its sequence.
                end = max(cursor, toldBefore ?? cursor)
                if told == toldBefore { told = nil }
            }
            if outage {
                outage = false
                DriveLog.info("the workspace server answers again: Backups/ follows its changes again")
            }
            return !changed.isEmpty
        } catch let failure as RemoteFailure {
            if thread.stopping { return nil }
            if !outage {
                outage = true
                DriveLog.error("Backups/ cannot reach the workspace server (\(failure)): it shows the last known records until the server answers")
            }
        } catch {
            DriveLog.error("Backups/ could not store the server's records: \(error); retrying in \(interval) s")
        }
        return nil
    }
}
