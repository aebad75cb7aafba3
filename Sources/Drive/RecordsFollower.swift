import Foundation

/// Keeps the records table up to date with the server: at start it reads the feed
/// from the stored cursor to its end (the first mount: every version the server
/// keeps), then asks again every `interval` seconds. Each page is applied in one
/// transaction with the `Backups/` rows it changes. An unreachable server is one log
/// line per outage; the table keeps serving the last known records.
///
/// Why a short interval and not a long poll: one `GET /v1/changes` with nothing new is
/// two primary-key range reads on the server; a second's poll keeps a record made on another
/// device within about a second of appearing (Docs/benchmarks.md, "Backups/
/// freshness") without a held connection per drive or new server machinery.
/// `@unchecked Sendable`: `outage` is used only by the follower's thread.
public final class RecordsFollower: @unchecked Sendable {
    private let table: RecordsTable
    private let remote: RemoteRecords
    private let interval: Double
    private let follower = BackgroundThread(name: "vdrive-records")
    private var outage = false

    public init(table: RecordsTable, remote: RemoteRecords, interval: Double = 1.0) {
        self.table = table
        self.remote = remote
        self.interval = interval
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
    /// poll): an idle drive asks once per `hold`, and hears of a change as it commits.
    public var hold = 30

    /// Catches up at once, then keeps a held request open on the feed. A server that
    /// does not hold requests (it answers at once) is asked again every `interval`.
    public func start() {
        follower.start { [self] in
            var wait = 0
            var pauseFor = 0.0
            repeat {
                let started = Date()
                let brought = step(wait: wait)
                wait = hold
                let elapsed = Date().timeIntervalSince(started)
                pauseFor = brought || elapsed >= interval ? 0 : interval - elapsed
            } while !follower.pause(pauseFor)
        }
    }

    /// Stops the thread and waits for it (at most one request's timeout).
    public func stop() { follower.stop() }

    /// One catch-up; true when it brought something.
    private func step(wait: Int) -> Bool {
        let thread = follower
        do {
            let changed = try Self.catchUp(table, from: remote, wait: wait, cancelled: { thread.stopping })
            if outage {
                outage = false
                DriveLog.info("the workspace server answers again: Backups/ follows its changes again")
            }
            return !changed.isEmpty
        } catch let failure as RemoteFailure {
            if thread.stopping { return false }
            if !outage {
                outage = true
                DriveLog.error("Backups/ cannot reach the workspace server (\(failure)): it shows the last known records until the server answers")
            }
        } catch {
            DriveLog.error("Backups/ could not store the server's records: \(error); retrying in \(interval) s")
        }
        return false
    }
}
