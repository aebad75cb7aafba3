import Storage

/// What happened to a name or an inode of the drive.
public enum DriveChangeKind: Int, Sendable {
    /// A file, folder, symlink or special file was created (or given another name: a hard link).
    case created = 1
    /// A file's content was committed (a close, an fsync, a truncate).
    case content = 2
    /// A name moved: rename or move, a rename over another name, an exchange.
    case renamed = 4
    /// A name went (unlink, rmdir, replaced by a rename).
    case removed = 8
    /// The mode or the modification time changed without new content.
    case attributes = 16
}

/// Whoever follows the drive's changes (the mirror of the workspace). One seam: every
/// change the kernel makes to the catalog is told here, **inside the change's own
/// transaction** (a savepoint of the open group), so that what the follower records
/// is committed, or lost, with the change itself: a follower never hears of a change
/// the catalog does not have, and never misses one it has.
///
/// Changes the drive makes on a follower's behalf (`DriveFileSystem.applyExternal`) are
/// not told: they are the follower's own.
public protocol ChangeJournal: AnyObject, Sendable {
    /// Inside the change's transaction, under the catalog's lock: must be quick (one
    /// insert) and must not call back into the drive. Throwing rolls the change back.
    func record(_ kind: DriveChangeKind, ino: UInt64, in database: Database) throws

    /// After the transaction (or group of them) holding recorded changes committed, under
    /// the catalog's lock: must be quick. What was recorded is now visible to other
    /// connections; a follower reading from its own connection looks now, not at
    /// `record`, which runs before the commit (up to a group's window before it).
    func committed()
}

extension Catalog {
    /// Tells the journal, if any and unless the change is an external one.
    func journal(_ kind: DriveChangeKind, _ ino: UInt64) throws {
        guard let journal, !applyingExternal else { return }
        try journal.record(kind, ino: ino, in: db)
        journalAwaitsCommit = true
    }

    /// Tells the journal that what it recorded is committed, if it recorded anything
    /// since the last time. Called with the lock held, once nothing is left uncommitted.
    func journalCommitted() {
        guard journalAwaitsCommit else { return }
        journalAwaitsCommit = false
        journal?.committed()
    }
}
