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
    /// Whether hard links in the workspace are refused (see `allowsLink`).
    let refusesLinks: Bool

    /// `refusesLinks`: a server is configured, so what is made now is sent. Without one,
    /// the drive is a local folder until it has one, with the file system's every call.
    public init(refusesLinks: Bool = false) { self.refusesLinks = refusesLinks }

    /// A node of the workspace has one place (a parent and a name): a second name of a
    /// file could only go to the other devices as a file of its own, which a write here
    /// (to both names) and a write there (to one) would then tell apart. So, as on file
    /// systems without hard links (FAT, most network and cloud drives), the synced
    /// workspace refuses them; tools fall back to a copy (`git clone` of a local
    /// repository) or say so (`ln`, `cp -al`). Within the Camera Roll, which is not
    /// synced, they are made as anywhere.
    public func allowsLink(of existing: String, as new: String) -> Bool {
        !refusesLinks || (!MirrorRules.isInWorkspace(path: existing) && !MirrorRules.isInWorkspace(path: new))
    }

    public func record(_ change: DriveChange, in database: Database) throws {
        if try isTheCameraRollsOwn(change, database) { return }
        try MirrorRows.markDirty(change.ino, now: MirrorClock.nanoseconds(), in: database)
    }

    /// A new photo in the Camera Roll, its content and its mode are the camera backup's,
    /// never the workspace's: left unmarked, they wake no pass and are not counted as
    /// waiting to go up while an import runs. Still marked: every rename and removal (a
    /// node moving into or out of the workspace), a node the workspace has synced, and one
    /// with a second name, which the workspace may know it by.
    private func isTheCameraRollsOwn(_ change: DriveChange, _ database: Database) throws -> Bool {
        guard change.kind == .created || change.kind == .content || change.kind == .attributes,
              let path = try change.path(), !MirrorRules.isInWorkspace(path: path) else { return false }
        let names = try database.queryOne("SELECT count(*) FROM entries WHERE ino = ?", change.ino) { $0.int64(0) } ?? 0
        guard names == 1 else { return false }
        return try MirrorRows.synced(ino: change.ino, in: database) == nil
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
