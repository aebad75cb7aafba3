import Foundation
import Drive
import Storage

/// The mirror's subscription to the drive's change journal: every change the kernel makes
/// marks its inode dirty, in the change's own transaction (one insert), and the engine is
/// woken once that commits: woken earlier, its own connection would not see the mark yet
/// and it would sleep until its next look. What changed is read later from the catalog
/// itself: the mirror sends the latest settled state, never a replay of each step.
public final class MirrorJournal: ChangeJournal, @unchecked Sendable {   // `wake` is set once, before the mount serves
    var wake: (@Sendable () -> Void)?

    public init() {}

    public func record(_ change: DriveChange, in database: Database) throws {
        try MirrorRows.markDirty(change.ino, now: MirrorClock.nanoseconds(), in: database)
    }

    public func committed() { wake?() }
}

enum MirrorClock {
    static func nanoseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
