import Crypto
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

/// A follower of the drive's changes (the workspace mirror, the camera backup). One seam,
/// any number of followers: every change the kernel makes to the catalog is told to each,
/// **inside the change's own transaction** (a savepoint of the open group), so that what a
/// follower records is committed, or lost, with the change itself: a follower never hears
/// of a change the catalog does not have, and never misses one it has.
///
/// The drive decides nothing about what a change means to a follower (which folder is
/// backed up, which names are temporary): each follower asks what it needs of the change
/// (`DriveChange`: its path, its content, a sequence number) and keeps what concerns it.
///
/// Changes the drive makes on a follower's behalf (`DriveFileSystem.applyExternal`) are
/// told to no follower: they are the mirror's own, and never touch the camera roll.
///
/// Every method runs under the catalog's lock: each must be quick and must not call back
/// into the drive's API (the `DriveChange` it is given reads what it needs itself).
public protocol ChangeJournal: AnyObject, Sendable {
    /// Inside the change's transaction. Throwing rolls the change back (the caller of the
    /// operation hears the error).
    func record(_ change: DriveChange, in database: Database) throws

    /// After the transaction (or group of them) holding recorded changes committed. What
    /// was recorded is now visible to other connections; a follower reading from its own
    /// connection looks now, not at `record`, which runs before the commit (up to a
    /// group's window before it). Told to every follower when any of them recorded.
    func committed()

    /// Inside a transaction: the last writable handle of `ino` was released, so the
    /// versions of it committed while one was open have settled (`ContentVersion.settled`).
    /// Asked only of an inode whose unsettled version a follower took (`DriveChange.version`).
    /// Returns true when that changed something of the follower's: the transaction then
    /// commits at once, and `committed` follows.
    func settled(ino: UInt64, in database: Database) throws -> Bool

    /// Before a content commit, whether the file's blocks must be block files even when
    /// small enough to be packed (InlineBlocks.swift): the camera backup's
    /// photos, whose blocks optimize storage may make online-only. `path` gives the file's
    /// workspace path (see `DriveChange.path`), during this call only.
    func keepsBlockFiles(ino: UInt64, path: () throws -> String?) throws -> Bool

    /// Before a hard link is made: whether this follower can follow a second name of the
    /// file at `existing` under `new` (workspace paths). False refuses the link (EPERM,
    /// as a file system without hard links answers `link(2)`).
    func allowsLink(of existing: String, as new: String) -> Bool
}

extension ChangeJournal {
    public func settled(ino: UInt64, in database: Database) throws -> Bool { false }
    public func keepsBlockFiles(ino: UInt64, path: () throws -> String?) throws -> Bool { false }
    public func allowsLink(of existing: String, as new: String) -> Bool { true }
}

/// A file's content as a change left it: what a follower that keeps or sends versions needs.
public struct ContentVersion: Sendable, Equatable {
    /// The content hash (Crypto's `ContentHash`: SHA-256 of the block digests).
    public let hash: SHA256Digest
    /// Every block's digest in order, zero blocks (holes) included.
    public let blocks: [SHA256Digest]
    public let size: Int64
    public let mtimeNanoseconds: Int64
    /// False when a writable handle is still open on the file: a writer's child closing
    /// an inherited descriptor commits a half-written version, which must not be sent.
    /// The version settles when the last writable handle is released
    /// (`ChangeJournal.settled`).
    public let settled: Bool
}

/// One change, as each follower hears it in `ChangeJournal.record`. Valid only during
/// that call (it reads the catalog inside the change's transaction, under its lock): a
/// follower keeps the values it asks for, never the change.
///
/// What costs a query is worked out on first ask and shared by every follower: the path
/// of a file costs one query, once, whoever asks (its folder's path is remembered,
/// `Catalog.Locked.folderPaths`).
public final class DriveChange {
    public let kind: DriveChangeKind
    public let ino: UInt64
    private let catalog: Catalog.Locked
    private var knownPath: String??
    private var knownVersion: ContentVersion??
    private var number: Int64?
    /// False once every follower was told: asking then is a follower's mistake.
    var valid = true

    /// `version`: the content just committed, for a `.content` change. `earlier`: a change
    /// of the same inode asked about in this operation, whose path holds (no name moved since).
    /// `madeAs`: the one name of a node this change created, so its path needs no query.
    init(_ kind: DriveChangeKind, _ ino: UInt64, catalog: Catalog.Locked, sharingPathWith earlier: DriveChange? = nil,
         version: ContentVersion? = nil, madeAs: (parent: UInt64, name: [UInt8])? = nil) {
        self.kind = kind
        self.ino = ino
        self.catalog = catalog
        self.madeAs = madeAs
        knownPath = earlier?.knownPath
        if let version { knownVersion = .some(version) }
    }
    private let madeAs: (parent: UInt64, name: [UInt8])?

    /// The workspace path of the inode as this change left it ("Camera Roll/2024/IMG_1.jpg";
    /// the first name of a hard-linked file), nil when it has no name left.
    public func path() throws -> String? {
        precondition(valid, "a DriveChange is read only during ChangeJournal.record")
        if let knownPath { return knownPath }
        let path = try madeAs.map { try catalog.path(ofNewName: $0.name, in: $0.parent) } ?? catalog.pathThroughFolders(of: ino)
        knownPath = .some(path)
        return path
    }

    /// The file's content as of this change: for `.content`, the version just committed;
    /// for any other change of a regular file with content (a rename into place), its
    /// current version; nil for anything else. A follower that takes an unsettled version
    /// is asked `settled(ino:in:)` when the file's last writable handle is released.
    public func version() throws -> ContentVersion? {
        precondition(valid, "a DriveChange is read only during ChangeJournal.record")
        let version: ContentVersion?
        if let knownVersion {
            version = knownVersion
        } else {
            version = try catalog.currentVersion(of: ino)
            knownVersion = .some(version)
        }
        if let version, !version.settled { catalog.unsettledInodes.insert(ino) }
        return version
    }

    /// A number for this change, above every number given before in this catalog (a row of
    /// `numbered_changes`, written on first ask, in this transaction): the backup orders the
    /// versions it queues by it.
    public func sequence() throws -> Int64 {
        precondition(valid, "a DriveChange is read only during ChangeJournal.record")
        if let number { return number }
        let v = try version()
        try catalog.db.run("INSERT INTO numbered_changes(ino, path, hash, size, mtime_ns, committed_ns) VALUES (?, ?, ?, ?, ?, ?)",
                           ino, try path() ?? "", v?.hash.hex, v?.size ?? 0, v?.mtimeNanoseconds ?? 0, nowNanoseconds())
        let n = catalog.db.lastInsertRowID
        number = n
        return n
    }

    /// Asks for this change to be committed at once, with the group before it, instead of
    /// within the group commit's window: for a change the follower must not lose to a kill
    /// once the operation returned (a photo's close, queued for backup).
    public func commitAtOnce() {
        precondition(valid, "a DriveChange is read only during ChangeJournal.record")
        catalog.commitRequested = true
    }
}

extension Catalog.Locked {
    /// Tells every follower of a change, unless it is an external one.
    func journal(_ kind: DriveChangeKind, _ ino: UInt64) throws {
        guard !journals.isEmpty, !applyingExternal else { return }
        try journal(DriveChange(kind, ino, catalog: self))
    }

    func journal(_ change: DriveChange) throws {
        guard !journals.isEmpty, !applyingExternal else { return }
        defer { change.valid = false }
        for follower in journals { try follower.record(change, in: db) }
        journalAwaitsCommit = true
    }

    /// Tells the followers that what they recorded is committed, if they recorded anything
    /// since the last time; called once nothing is left uncommitted.
    func journalCommitted() {
        guard journalAwaitsCommit else { return }
        journalAwaitsCommit = false
        for follower in journals { follower.committed() }
    }

    /// Whether a follower wants the blocks of `change`'s file as block files.
    func followersKeepBlockFiles(_ change: DriveChange) throws -> Bool {
        defer { change.valid = false }
        for follower in journals {
            if try follower.keepsBlockFiles(ino: change.ino, path: { try change.path() }) { return true }
        }
        return false
    }

    /// The content of a regular file as it is now, nil for anything else.
    func currentVersion(of ino: UInt64) throws -> ContentVersion? {
        let a = try node(ino)
        guard a.isRegularFile, let content = a.content else { return nil }
        return ContentVersion(hash: content, blocks: Catalog.fullList(try Catalog.blockRows(of: ino, in: db), size: a.size), size: a.size,
                              mtimeNanoseconds: a.mtime, settled: !(hasWriters?(ino) ?? false))
    }

    /// The path of an inode from its name and its folder's remembered path: one query for
    /// a file whose folder was met before, not one per folder up to the root (15-20 µs of
    /// every commit of `tar x` when walked).
    func pathThroughFolders(of ino: UInt64) throws -> String? {
        guard ino != Catalog.rootIno else { return "" }
        // The name read as text: its bytes decoded as `path(of:)` decodes them, with no copy between.
        guard let (parent, leaf) = try db.queryOne("SELECT parent, name FROM entries WHERE ino = ? ORDER BY id LIMIT 1", ino,
                                                   row: { (UInt64($0.int64(0)), $0.string(1) ?? "") }) else { return nil }
        if parent == Catalog.rootIno { return leaf }
        guard let folder = try folderPath(parent) else { return nil }
        return folder + "/" + leaf
    }

    /// The path of a name just made in `parent`, from the folder's remembered path: no
    /// query for the name (decoded as `pathThroughFolders` decodes the names it reads).
    func path(ofNewName name: [UInt8], in parent: UInt64) throws -> String? {
        let leaf = String(decoding: name, as: UTF8.self)
        if parent == Catalog.rootIno { return leaf }
        guard let folder = try folderPath(parent) else { return nil }
        return folder + "/" + leaf
    }

    /// A folder's path, remembered with those of the folders above it until a folder moves
    /// or goes (`folderPaths`): the walk up stops at the first one known.
    private func folderPath(_ folder: UInt64) throws -> String? {
        if let known = folderPaths[folder] { return known }
        var chain: [(ino: UInt64, name: String)] = []   // from `folder` up
        var current = folder
        var base = ""
        while current != Catalog.rootIno {
            if let known = folderPaths[current] { base = known; break }
            // A folder met twice would be a damaged catalog: no path rather than a loop.
            guard chain.count < 4096,
                  let (parent, name) = try db.queryOne("SELECT parent, name FROM entries WHERE ino = ? ORDER BY id LIMIT 1", current,
                                                       row: { (UInt64($0.int64(0)), $0.string(1) ?? "") }) else { return nil }
            chain.append((current, name))
            current = parent
        }
        if folderPaths.count + chain.count > 65_536 { folderPaths.removeAll() }
        var path = base
        for (ino, name) in chain.reversed() {
            path = path.isEmpty ? name : path + "/" + name
            folderPaths[ino] = path
        }
        return path
    }
}
