import Foundation
import Crypto
import Storage

/// Group commit: the catalog's changes of a few milliseconds share one SQLite commit
/// (Docs/architecture.md, "Group commit").
///
/// Each change still runs whole or not at all (a savepoint of the open transaction),
/// and the catalog's own connection, which serves every FUSE request, sees it at once.
/// What changes is only when a change survives a kill of the process: at the group's
/// commit, at most `window` after the change, instead of before its reply. A change a
/// follower asks to commit at once (`DriveChange.commitAtOnce`: the backup, for a photo
/// it queued), `fsync`, the flusher and an unmount commit the group at once. What a kill loses is always the newest changes
/// in the order they were made: the catalog after a kill is the drive as it was at some
/// moment, never a mix.
///
/// Side effects outside SQLite wait for the commit: a block file that lost its last
/// reference is removed only after the transaction dropping its row committed (else a
/// kill would bring the row back without its file).
extension Catalog {
    /// Starts grouping commits: a change opens a group, which is committed by the change
    /// that finds it `window` old, or by the committer thread at that deadline.
    func startGroupCommits(window: TimeInterval) {
        withDatabaseUnchecked { locked in
            guard window > 0, locked.groupCommitter == nil else { return }
            let committer = GroupCommitter(catalog: self, window: UInt64(window * 1e9))
            locked.groupCommitter = committer
            locked.db.groupsCommits = true
            committer.start()
        }
    }

    /// Commits the open group and goes back to one commit per change (unmount).
    func stopGroupCommits() {
        let committer: GroupCommitter? = withDatabaseUnchecked { locked in
            let c = locked.groupCommitter
            locked.groupCommitter = nil
            locked.commitGroupLogged()
            locked.db.groupsCommits = false
            return c
        }
        committer?.stop()
    }
}

extension Catalog.Locked {
    /// Commits the open group now; throws when that failed (the caller needs it durable:
    /// fsync, the flusher, a change a follower asked to commit at once).
    func commitGroup() throws {
        do {
            try db.commitGroup()
        } catch let lost as Database.GroupLost {
            groupWasLost(lost)
            throw lost
        }
        inodesCommittedBelow = nextIno
        let removals = removalsAfterCommit
        removalsAfterCommit = []
        if !removals.isEmpty { removeUnnamedBlockFiles(removals) }
        packGroupCommitted()
        journalCommitted()
    }

    /// Commits the open group now for a change that must be durable at once (a photo's
    /// close). Throws only when the group, and so this change, is gone; a commit SQLite
    /// kept open is logged and retried like any other, and the change stays in it (the
    /// caller must not undo what the change needs, such as its new block files).
    func commitGroupKeepingChanges() throws {
        do { try commitGroup() } catch let lost as Database.GroupLost {
            throw lost
        } catch {
            DriveLog.error("committing the catalog's last changes failed: \(error); will retry")
        }
    }

    /// The same where nobody waits for the outcome: a failure is logged, and a group
    /// SQLite kept open is retried at the next change or deadline.
    func commitGroupLogged() {
        try? commitGroupKeepingChanges()   // a lost group is logged by groupWasLost
    }

    /// After every change (`Catalog.withDatabase`): commits a group that reached its window,
    /// else makes sure the committer wakes at its deadline.
    func endOfChange() {
        if let suspended = groupsSuspendedAt, db.commitCount > suspended {
            groupsSuspendedAt = nil
            db.groupsCommits = groupCommitter != nil
            DriveLog.info("the catalog commits again; changes share commits again")
        }
        guard let started = db.groupStarted, let committer = groupCommitter else {
            inodesCommittedBelow = nextIno   // no group open: everything so far is committed
            journalCommitted()
            return
        }
        let deadline = started + committer.window
        if Database.monotonicNanoseconds() >= deadline {
            commitGroupLogged()
        } else {
            committer.wake(at: deadline)
        }
    }

    /// SQLite rolled a group back (disk full or an I/O error at its commit): the changes
    /// of its last milliseconds are gone, as a power cut loses ext4's last seconds. The
    /// caches go with them; block files stay (their rows are back).
    /// Until a commit succeeds again, each change commits on its own, so that its caller
    /// hears of the failure (ENOSPC at close) instead of a success that is lost later.
    func groupWasLost(_ lost: Database.GroupLost) {
        guard groupsSuspendedAt == nil else { return }   // this loss was handled where it was thrown
        DriveLog.error("\(lost); the drive is back to its state of a few milliseconds earlier: files changed in that time may be missing or older, check free space. Until a commit succeeds again, every change is committed before its reply")
        removalsAfterCommit = []
        packGroupLost()
        journalAwaitsCommit = false   // what it recorded went with the group
        forgetCaches()
        if inodesCommittedBelow < nextIno { lostInodes.append(inodesCommittedBelow..<nextIno) }
        inodesCommittedBelow = nextIno
        groupsSuspendedAt = db.commitCount
        db.groupsCommits = false
    }
}

/// The thread that commits a group when no later change does (the last change of a burst).
/// `@unchecked Sendable`: `deadline` is guarded by `condition`.
final class GroupCommitter: @unchecked Sendable {
    /// Weak: a catalog dropped without `stopGroupCommits` (a test) leaves a thread that
    /// finds nothing to commit, not one that reads freed memory. Private: the catalog's
    /// state holds this committer, and a step under the lock must find no way back to
    /// the catalog (its lock is not recursive).
    private weak var catalog: Catalog?
    let window: UInt64
    private let committer = BackgroundThread(name: "vd-group-commit")
    private var condition: NSCondition { committer.condition }
    private var deadline: UInt64?

    init(catalog: Catalog, window: UInt64) {
        self.catalog = catalog
        self.window = window
    }

    func start() { committer.start { [self] in run() } }

    func stop() { committer.stop() }

    /// Asks for a commit at `at` (monotonic ns) unless one is asked for earlier.
    func wake(at: UInt64) {
        condition.lock()
        if deadline == nil {
            deadline = at
            condition.signal()
        }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while deadline == nil && !committer.stopping { condition.wait() }
            if committer.stopping { condition.unlock(); return }
            let target = deadline!
            let now = Database.monotonicNanoseconds()
            if now < target {
                _ = condition.wait(until: Date().addingTimeInterval(Double(target - now) / 1e9))
                condition.unlock()
                continue
            }
            deadline = nil
            condition.unlock()
            guard let catalog else { return }
            catalog.withDatabaseUnchecked { locked in
                guard let started = locked.db.groupStarted else { return }
                if Database.monotonicNanoseconds() >= started + window {
                    locked.commitGroupLogged()
                    // Still open (SQLite kept it after a failed commit): try again later.
                    if locked.db.groupStarted != nil { wake(at: Database.monotonicNanoseconds() + window) }
                } else {
                    wake(at: started + window)
                }
            }
        }
    }
}
