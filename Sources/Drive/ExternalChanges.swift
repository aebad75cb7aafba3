import Foundation
import Crypto
import Storage

/// One name of the workspace as the catalog has committed it: what a follower of the
/// drive's changes (the mirror) compares with what it last agreed on.
public struct DriveEntry: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case file, folder, symlink, special }
    public let ino: UInt64
    public let parent: UInt64
    public let name: [UInt8]
    public let kind: Kind
    /// Permission bits only.
    public let permissions: UInt32
    public let size: Int64
    /// Nanoseconds since 1970.
    public let mtime: Int64
    /// A file's content hash; nil for an empty file never written, and for other kinds.
    public let content: SHA256Digest?
    public let target: [UInt8]?
    /// How many names the inode has (a hard-linked file has several).
    public let names: UInt32
}

/// One name of the committed tree (`DriveFileSystem.committedNames`).
public struct CommittedName: Sendable, Equatable {
    public let parent: UInt64
    public let name: [UInt8]
    public let ino: UInt64
    public let kind: DriveEntry.Kind
    /// A symlink's target; nil for other kinds.
    public let target: [UInt8]?
    /// The inode had a name before this one: a second name of a hard-linked file.
    public let laterName: Bool
}

/// Changes made to the catalog by someone other than the kernel: the mirror applying
/// what other devices did. Valid only inside `DriveFileSystem.applyExternal`, which
/// runs them in one transaction under the catalog's lock; they are not told to the
/// change journal (they are its follower's own), and the kernel's caches of every name
/// and inode they touched are dropped after the commit.
public final class ExternalEdit {
    let catalog: Catalog.Locked
    /// The catalog's connection, for the caller's own rows in the same transaction.
    public let database: Database
    let owner: (uid: UInt32, gid: UInt32)
    fileprivate(set) var staleNames: [(UInt64, [UInt8])] = []
    fileprivate(set) var staleInodes: Set<UInt64> = []
    fileprivate(set) var removed: [UInt64] = []

    init(catalog: Catalog.Locked, owner: (uid: UInt32, gid: UInt32)) {
        self.catalog = catalog
        database = catalog.db
        self.owner = owner
    }

    public func entry(_ ino: UInt64) throws -> DriveEntry? { try catalog.entry(ino) }

    public func child(_ parent: UInt64, _ name: [UInt8]) throws -> DriveEntry? {
        guard let ino = try database.queryOne("SELECT ino FROM entries WHERE parent = ? AND name = ?", parent, name, row: { UInt64($0.int64(0)) }) else {
            return nil
        }
        return try catalog.entry(ino)
    }

    /// Creates a folder, an empty file or a symlink; its content comes with `setContent`.
    /// With no `mtime` it is made now, as by a local call.
    public func create(parent: UInt64, name: [UInt8], kind: DriveEntry.Kind, permissions: UInt32, mtime: Int64?, target: [UInt8]?) throws -> UInt64 {
        try Catalog.checkName(name)
        let type: UInt32
        switch kind {
        case .folder: type = UInt32(S_IFDIR)
        case .file: type = UInt32(S_IFREG)
        case .symlink: type = UInt32(S_IFLNK)
        case .special: throw Errno.invalidArgument
        }
        let parentNode = try catalog.node(parent)
        guard parentNode.isDirectory, parentNode.nlink > 0 else { throw Errno.notDirectory }
        if try child(parent, name) != nil { throw Errno.fileExists }
        let a = try catalog.insertNode(parent: parent, name: name, mode: type | (permissions & 0o7777), uid: owner.uid, gid: owner.gid,
                                       rdev: 0, target: kind == .symlink ? target : nil, now: nowNanoseconds())
        if let mtime { try database.run("UPDATE inodes SET mtime_ns = ? WHERE ino = ?", mtime, a.ino) }
        staleNames.append((parent, name))
        return a.ino
    }

    /// Points a file at a content held by the server: its blocks become rows the drive
    /// does not hold (fetched on first read, verified), unless the drive already has them.
    /// `blocks` is the full list (zero blocks included); it must hash to `content`.
    public func setContent(_ ino: UInt64, content: SHA256Digest, blocks: [SHA256Digest], size: Int64, mtime: Int64) throws {
        guard size >= 0, blocks.count == Blocks.count(forSize: size), ContentHash.of(blocks: blocks) == content else {
            throw Errno.invalidArgument
        }
        let a = try catalog.node(ino)
        guard a.isRegularFile else { throw Errno.invalidArgument }
        // A file has block rows only below its size: an empty one (a file just made for
        // a remote change, the common case) has none to clear.
        if a.size > 0 { try database.run("DELETE FROM file_blocks WHERE ino = ?", ino) }
        var stored: Int64 = 0
        var online = false
        for (index, digest) in blocks.enumerated() {
            let length = Blocks.length(ofBlock: index, fileSize: size)
            if Blocks.isZero(digest, length: length) { continue }
            let made = try database.run("INSERT INTO blocks(hash, size, refs, gen, resident) VALUES (?, ?, 0, ?, 0) ON CONFLICT(hash) DO NOTHING",
                                        digest.hex, length, catalog.generation) == 1
            try database.run("INSERT INTO file_blocks(ino, idx, hash) VALUES (?, ?, ?)", ino, index, digest.hex)
            stored += Int64(length)
            if !online {
                // A row just made is online-only; a block the drive had says whether it holds it.
                online = try made || (database.queryOne("SELECT resident FROM blocks WHERE hash = ?", digest.hex) { $0.int64(0) == 0 } ?? true)
            }
        }
        let now = nowNanoseconds()
        try database.run("UPDATE inodes SET content = ?, size = ?, stored = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?",
                         size == 0 ? nil : content.hex, size, stored, mtime, now, ino)
        if online { catalog.onlineInodes?.insert(ino) }
        staleInodes.insert(ino)
    }

    /// Sets the permission bits and the modification time.
    public func setAttributes(_ ino: UInt64, permissions: UInt32?, mtime: Int64?) throws {
        let a = try catalog.node(ino)
        let mode = permissions.map { (a.mode & S_IFMT) | ($0 & 0o7777) } ?? a.mode
        try database.run("UPDATE inodes SET mode = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?", mode, mtime ?? a.mtime, nowNanoseconds(), ino)
        staleInodes.insert(ino)
    }

    /// Moves the name `(parent, name)` to `(newParent, newName)`, which must be free.
    /// A folder is never moved into itself.
    public func move(parent: UInt64, name: [UInt8], to newParent: UInt64, _ newName: [UInt8]) throws {
        try Catalog.checkName(newName)
        guard let source = try child(parent, name) else { throw Errno.noSuchFileOrDirectory }
        if try child(newParent, newName) != nil { throw Errno.fileExists }
        let destination = try catalog.node(newParent)
        guard destination.isDirectory, destination.nlink > 0 else { throw Errno.notDirectory }
        if source.kind == .folder {
            if try catalog.isAncestor(source.ino, of: newParent) { throw Errno.invalidArgument }
            catalog.folderPaths.removeAll()
        }
        let now = nowNanoseconds()
        try database.run("UPDATE entries SET parent = ?, name = ? WHERE parent = ? AND name = ?", newParent, newName, parent, name)
        let delta = source.kind == .folder && parent != newParent ? 1 : 0
        try catalog.touchDirectory(parent, now: now, linkDelta: -delta)
        if newParent != parent { try catalog.touchDirectory(newParent, now: now, linkDelta: delta) }
        staleNames.append((parent, name))
        staleNames.append((newParent, newName))
    }

    /// Removes the name `(parent, name)`; a folder must be empty. The inode goes when
    /// nothing refers to it any more (as after unlink).
    public func remove(parent: UInt64, name: [UInt8]) throws {
        guard let victim = try child(parent, name) else { return }
        if victim.kind == .folder,
           try database.queryOne("SELECT 1 FROM entries WHERE parent = ? LIMIT 1", victim.ino, row: { _ in true }) ?? false {
            throw Errno.notEmpty
        }
        try catalog.unlinkEntry(parent: parent, name: name, victim: try catalog.node(victim.ino), now: nowNanoseconds())
        staleNames.append((parent, name))
        removed.append(victim.ino)
    }
}

extension Catalog.Locked {
    /// The committed entry of an inode with a name (its first name), nil without one.
    func entry(_ ino: UInt64) throws -> DriveEntry? {
        guard let (parent, name) = try db.queryOne("SELECT parent, name FROM entries WHERE ino = ? ORDER BY id LIMIT 1", ino,
                                                   row: { (UInt64($0.int64(0)), $0.bytes(1) ?? []) }) else { return nil }
        let a = try node(ino)
        let kind: DriveEntry.Kind = a.isDirectory ? .folder : a.isRegularFile ? .file : a.isSymlink ? .symlink : .special
        let target = kind == .symlink ? try db.queryOne("SELECT target FROM inodes WHERE ino = ?", ino) { $0.bytes(0) ?? [] } : nil
        return DriveEntry(ino: ino, parent: parent, name: name, kind: kind, permissions: a.mode & 0o7777, size: a.size,
                          mtime: a.mtime, content: kind == .file ? a.content : nil, target: target ?? nil, names: a.nlink)
    }
}

extension DriveFileSystem {
    /// Commits the open group, so that what is read next is what a kill would keep: a
    /// follower never acts on a change the catalog may still lose.
    private func committed<T>(_ body: (Catalog.Locked) throws -> T) throws -> T {
        try catalog.withDatabase { locked in
            try locked.commitGroup()
            return try body(locked)
        }
    }

    /// Commits the open group, so that other connections see every change made so far
    /// and the journal's marks with them (a follower woken inside a change's transaction
    /// reads its own tables after this, not before the change is there to read).
    public func commitOpenChanges() throws { try committed { _ in } }

    /// Runs `body` with the drive's changes held and its open group committed: a follower
    /// writing its own tables in the catalog file on a connection of its own then never
    /// meets the drive's SQLite write lock. Met, SQLite's busy wait sleeps in steps of
    /// milliseconds on both sides, and a FUSE request waited behind a follower's commit
    /// (a large copy into a synced drive ran at a fraction of its speed). `body` must not
    /// call back into the drive: the lock is not recursive.
    public func holdingChanges<T>(_ body: () throws -> T) throws -> T { try committed { _ in try body() } }

    /// The committed entry of an inode, nil when it has no name (removed). Read on a
    /// connection of its own (`CommittedReads`): what the last commit left, without
    /// taking the catalog's lock or committing the open group (a follower reading each
    /// file of a large copy must not commit the group once per file under the writer).
    public func committedEntry(_ ino: UInt64) throws -> DriveEntry? {
        try committedReads.read(catalogPath) { db in try CommittedReads.entry(ino, in: db) }
    }

    /// The inode named `name` in `folder`, as committed; nil when the name is free.
    public func committedIno(named name: [UInt8], in folder: UInt64) throws -> UInt64? {
        try committedReads.read(catalogPath) { db in
            try db.queryOne("SELECT ino FROM entries WHERE parent = ? AND name = ?", folder, name) { UInt64($0.int64(0)) }
        }
    }

    /// Every committed name of the tree, in the order they were made, with its kind and
    /// whether it is a later name of an inode named before (a hard link's second name).
    /// One read on the committed-reads connection: a scan of the whole catalog, for a
    /// reader that asks now and then (a generated listing), not per change.
    public func committedNames() throws -> [CommittedName] {
        try committedReads.read(catalogPath) { db in
            var seen = Set<UInt64>()
            return try db.query("SELECT e.parent, e.name, e.ino, i.mode, i.target FROM entries e JOIN inodes i ON i.ino = e.ino ORDER BY e.id") { r in
                let ino = UInt64(r.int64(2))
                let type = UInt32(truncatingIfNeeded: r.int64(3)) & UInt32(S_IFMT)
                let kind: DriveEntry.Kind = type == UInt32(S_IFDIR) ? .folder : type == UInt32(S_IFREG) ? .file : type == UInt32(S_IFLNK) ? .symlink : .special
                return CommittedName(parent: UInt64(r.int64(0)), name: r.bytes(1) ?? [], ino: ino, kind: kind,
                                     target: kind == .symlink ? (r.bytes(4) ?? []) : nil, laterName: !seen.insert(ino).inserted)
            }
        }
    }

    /// The committed entries of a folder.
    public func committedEntries(in folder: UInt64) throws -> [DriveEntry] {
        try committed { locked in
            try locked.db.query("SELECT ino FROM entries WHERE parent = ? ORDER BY id", folder) { UInt64($0.int64(0)) }
                .compactMap { try locked.entry($0) }
        }
    }

    /// A file's full block list (zero blocks included), as committed.
    public func committedBlocks(_ ino: UInt64) throws -> [SHA256Digest] {
        try committedReads.read(catalogPath) { db in
            guard let size = try db.queryOne("SELECT size FROM inodes WHERE ino = ?", ino, row: { $0.int64(0) }) else {
                throw Errno.noSuchFileOrDirectory
            }
            return Catalog.fullList(try Catalog.blockRows(of: ino, in: db), size: size)
        }
    }

    /// Runs `body` in one transaction under the catalog's lock (see `ExternalEdit`), commits
    /// it at once, then drops the kernel's caches of what it touched.
    public func applyExternal<T>(owner: (uid: UInt32, gid: UInt32), _ body: (ExternalEdit) throws -> T) throws -> T {
        let (result, edit) = try catalog.withDatabase { locked in
            let edit = ExternalEdit(catalog: locked, owner: owner)
            try locked.commitGroup()
            locked.applyingExternal = true
            defer { locked.applyingExternal = false }
            let (value, garbage) = try locked.db.transaction { (try body(edit), try locked.takeUnreferencedBlocks()) }
            try locked.commitGroup()
            locked.removeUnnamedBlockFiles(garbage)
            return (value, edit)
        }
        durability.noteMetadataChanged()
        for (parent, name) in edit.staleNames { kernelEntryIsStale?(parent, name) }
        for ino in edit.staleInodes { kernelCacheIsStale?(ino) }
        for ino in edit.removed { releaseIfUnused(ino) }
        return result
    }
}

/// A connection to the catalog of its own, for followers reading what is committed: in
/// WAL mode a reader sees the last commit, never the open group. Opened on first use;
/// one reader at a time (a connection is used by one thread at a time).
final class CommittedReads: @unchecked Sendable {   // `db` under `lock`
    private let lock = NSLock()
    private var db: Database?

    func read<T>(_ path: String, _ body: (Database) throws -> T) throws -> T {
        try lock.withLock {
            let db = try self.db ?? Database(path: path)
            self.db = db
            // One read transaction: the rows of one commit, not of two.
            return try db.transaction(immediate: false) { try body(db) }
        }
    }

    static func entry(_ ino: UInt64, in db: Database) throws -> DriveEntry? {
        guard let (parent, name) = try db.queryOne("SELECT parent, name FROM entries WHERE ino = ? ORDER BY id LIMIT 1", ino,
                                                   row: { (UInt64($0.int64(0)), $0.bytes(1) ?? []) }) else { return nil }
        return try db.queryOne("SELECT mode, size, mtime_ns, content, nlink, target FROM inodes WHERE ino = ?", ino) { r in
            let mode = UInt32(truncatingIfNeeded: r.int64(0))
            let type = mode & UInt32(S_IFMT)
            let kind: DriveEntry.Kind = type == UInt32(S_IFDIR) ? .folder : type == UInt32(S_IFREG) ? .file : type == UInt32(S_IFLNK) ? .symlink : .special
            return DriveEntry(ino: ino, parent: parent, name: name, kind: kind, permissions: mode & 0o7777, size: r.int64(1),
                              mtime: r.int64(2), content: kind == .file ? r.string(3).flatMap(SHA256Digest.init(hex:)) : nil,
                              target: kind == .symlink ? (r.bytes(5) ?? []) : nil, names: UInt32(truncatingIfNeeded: r.int64(4)))
        }
    }
}
