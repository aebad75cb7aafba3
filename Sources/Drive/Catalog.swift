import Foundation
import Crypto
import Storage

/// The namespace and attributes of the workspace, in SQLite.
///
/// Thread safety: one connection and the state around it (`Locked`), used under `lock`.
/// The lock is visible in the types: every step that needs it held is a method of
/// `Catalog.Locked`, and only `withDatabase` (and `withDatabaseUnchecked`) hand one out,
/// with the lock taken. `Catalog`'s own methods each take the lock once and run the
/// `Locked` method of the same name, so each is atomic with respect to the others. Blob
/// files are adopted into and removed from the store only under the lock, so a blob that
/// loses its last reference cannot be removed while a concurrent commit is linking the
/// same content.
///
/// The lock is not recursive. A `Locked` has no way back to its `Catalog`, so a step
/// under the lock cannot take it again (it would wait for itself forever).
/// `@unchecked Sendable`: `locked` is reached only under `lock`.
final class Catalog: @unchecked Sendable {
    static let rootIno: UInt64 = 1
    static let maxNameLength = 255

    private let lock = NSLock()
    private let locked: Locked
    /// The catalog database's path (other pieces open their own connections to it).
    let databasePath: String
    /// The small blocks' bytes (PackFile.swift); safe on any thread.
    let pack: PackFile

    /// `extraMigrations` are other pieces' tables in this database (the backup queue),
    /// applied after the drive's own, in one ordered list. `rootFolders`: folders a new
    /// catalog starts with at its root (the wiring's Camera Roll).
    init(path: String, blobs: BlobStore, extraMigrations: [Migration] = [], rootFolders: [String] = []) throws {
        locked = try Locked(path: path, blobs: blobs, extraMigrations: extraMigrations, rootFolders: rootFolders)
        databasePath = locked.db.path
        pack = locked.pack
    }

    /// Runs `body` with the lock held, then the end-of-change step (GroupCommit.swift).
    func withDatabase<T>(_ body: (Locked) throws -> T) throws -> T {
        lock.lock(); defer { lock.unlock() }
        defer { locked.endOfChange() }
        do {
            return try body(locked)
        } catch let lost as Database.GroupLost {
            locked.groupWasLost(lost)   // SQLite dropped the whole group inside this change
            throw lost
        }
    }

    /// Runs `body` under the lock without the end-of-change step (the group commit's own
    /// bookkeeping must not recurse into it; setting up what the catalog tells).
    func withDatabaseUnchecked<T>(_ body: (Locked) throws -> T) rethrows -> T {
        lock.lock(); defer { lock.unlock() }
        return try body(locked)
    }

    /// Whether any follower listens, read without the lock: followers are added before the
    /// mount serves its first request and never removed, so a release with none (every
    /// release, without the mirror or the backup) costs no lock (`settle`).
    var hasFollowers: Bool { !locked.journals.isEmpty }

    /// The connection and everything kept beside it, reachable only with the catalog's
    /// lock held (`withDatabase`): a method here assumes the lock and never takes it.
    /// One per catalog, made with it; handed out by reference, never kept past the call
    /// that was given it.
    final class Locked {
        let db: Database
        let blobs: BlobStore
        /// The commit generation: increases with every content commit (see Durability.swift).
        var generation: Int64 = 0
        /// Inode rows as last read, dropped on every change (see `init`, `node`).
        var attributeCache: [UInt64: NodeAttributes] = [:]
        /// See `securityXattrInodes`.
        fileprivate var securityInodes: Set<UInt64>?
        /// Folder inode → its workspace path (`pathThroughFolders`). Emptied whenever a folder
        /// moves or goes, and when a change is rolled back, so it is never stale.
        var folderPaths: [UInt64: String] = [:]
        /// Inodes naming a block this drive does not hold (online only): their `stored`
        /// counts only what is here (see `heldHere`). Loaded on first use; eviction adds.
        var onlineInodes: Set<UInt64>?
        /// The followers of every change (ChangeJournal.swift), and whether the change being
        /// made is one made on a follower's behalf (told to none).
        var journals: [ChangeJournal] = []
        var applyingExternal = false
        /// The followers recorded changes that are not committed yet: they are told once they are.
        var journalAwaitsCommit = false
        /// Whether a writable handle is open on an inode (set by the file system; takes only
        /// its leaf lock, so it may be called under the catalog lock).
        var hasWriters: (@Sendable (UInt64) -> Bool)?
        /// Set when a follower asked for the change being made to commit at once
        /// (`DriveChange.commitAtOnce`); read after its transaction.
        var commitRequested = false
        /// Inodes with a version a follower took unsettled (a writable handle was open): the
        /// ones a release must settle. May hold extra inodes (a rolled-back commit): settling
        /// those finds nothing to do.
        var unsettledInodes: Set<UInt64> = []
        /// Group commit (GroupCommit.swift): the thread committing a group at its deadline,
        /// nil while every change commits at once.
        var groupCommitter: GroupCommitter?
        /// Told, under the lock, the block files a change stored (the flusher makes them
        /// durable): under the lock, so that whoever reads `generation` under it has heard
        /// of every block stored up to that generation.
        var blocksStored: (([SHA256Digest]) -> Void)?
        /// Block files to remove once the open group committed (their rows are dropped in it).
        var removalsAfterCommit: [SHA256Digest] = []
        /// The small blocks' bytes (PackFile.swift).
        let pack: PackFile
        /// Ranges of the pack appended and dropped by the transaction being made (CatalogPack.swift:
        /// settled at its end, `packChangeEnded`, or undone with it, `packChangeRolledBack`);
        /// then those of the open group: appended in it (freed if it is lost), dropped in it
        /// (freed once it committed).
        var packAppendedInChange: [PackRange] = []
        var packFreedInChange: [PackRange] = []
        var packRangesInGroup: [PackRange] = []
        var packRangesAfterCommit: [PackRange] = []
        /// Set when a group was lost: `Database.commitCount` then. Changes commit one by one
        /// (their callers hear of a failure) until one commits again (GroupCommit.swift).
        var groupsSuspendedAt: Int?
        /// The next inode number to hand out: above every number this process handed out,
        /// also when the change that used it was rolled back (a lost group), since the kernel
        /// may still know that number: one number never names two files in one mount.
        var nextIno: UInt64 = rootIno + 1
        /// `nextIno` when the last commit succeeded: numbers from here up were handed out in
        /// the open group. `lostInodes`: such ranges of groups that were lost.
        var inodesCommittedBelow: UInt64 = rootIno + 1
        var lostInodes: [Range<UInt64>] = []

        fileprivate init(path: String, blobs: BlobStore, extraMigrations: [Migration], rootFolders: [String]) throws {
            self.blobs = blobs
            db = try Database(path: path)
            pack = try PackFile(path: PackFile.path(besideCatalog: path), writable: true)
            let migrations = CatalogSchema.migrations + RecordsTable.migrations + extraMigrations
            try db.refuseNewerSchema(known: migrations)
            try db.execute("PRAGMA journal_mode = WAL")
            // NORMAL in WAL mode: a commit survives a process kill; durability against power
            // loss comes from the flusher's fsync of the WAL (Durability.swift).
            try db.execute("PRAGMA synchronous = NORMAL")
            // The flusher checkpoints in the background every second (Durability.swift), on a
            // connection of its own; this connection checkpoints only as a backstop (64 MB of
            // WAL), so a FUSE request rarely copies pages and fsyncs under the catalog lock.
            try db.execute("PRAGMA wal_autocheckpoint = 16000")
            // A WAL the checkpoints caught up with starts again from its first byte, over the
            // same file: its pages stay allocated and cached. Truncated to nothing at each reset
            // instead, every second of writes allocated and zeroed the WAL's pages and blocks
            // again: 12% more of the mount's CPU for `cp -r` of 10,000 small files
            // (Docs/benchmarks.md). The price: a reused frame (4,120 bytes, not
            // page-aligned) over a page the kernel dropped reads that page first, under the
            // catalog's lock (seen after `drop_caches` in `tar x`). Above 64 MB (a burst the
            // checkpoints fell behind on) the WAL is cut back to that size.
            try db.execute("PRAGMA journal_size_limit = 67108864")
            try db.execute("PRAGMA cache_size = -8000")
            // A change in an open group is a savepoint (GroupCommit.swift): SQLite keeps the
            // pages it would restore on its rollback in a sub-journal, in memory rather than in
            // a temporary file (which cost a write of every page a change touched, on disk).
            try db.execute("PRAGMA temp_store = MEMORY")
            try db.migrate(migrations)
            let highest = try db.queryOne("SELECT coalesce(max(ino), 0) FROM inodes") { UInt64($0.int64(0)) } ?? 0
            nextIno = max(highest, Catalog.rootIno) + 1
            inodesCommittedBelow = nextIno
            generation = try db.queryOne("SELECT coalesce(max(gen), 0) FROM blocks") { $0.int64(0) } ?? 0
            try BlockMigration.removeSplitBlobFiles(db, store: blobs)
            try moveInlineBlocksToPack()
            try cutPackTail()
            try bootstrapIfNew(rootFolders: rootFolders)
            // Every change of an inode row through this connection drops its cached copy;
            // a rollback drops them all (a row read inside the transaction may not stand).
            // Only this connection writes inodes, so the cache is exact.
            // A folder path remembered inside a rolled-back change (a folder moved in it) goes too.
            db.observeChanges(rowChanged: { [unowned self] table, rowid in
                if table == "inodes" { attributeCache.removeValue(forKey: UInt64(rowid)) }
            }, rolledBack: { [unowned self] in
                attributeCache.removeAll()
                folderPaths.removeAll()
                packChangeRolledBack()
            }, changeEnded: { [unowned self] in packChangeEnded() })
        }

        /// Runs a write transaction that may tell the followers of its changes; commits it at
        /// once when one of them asked (a photo is durable at its close, and the backup reads
        /// its queue on its own connection), which tells them `committed`.
        func write<T>(_ body: () throws -> T) throws -> T {
            commitRequested = false
            defer { commitRequested = false }
            let result = try db.transaction(body)
            if commitRequested { try commitGroupKeepingChanges() }
            return result
        }

        /// Drops every cache of rows (the rows they hold may have been rolled back).
        func forgetCaches() {
            attributeCache.removeAll()
            folderPaths.removeAll()
            securityInodes = nil
            onlineInodes = nil
        }

        private func bootstrapIfNew(rootFolders: [String]) throws {
            let hasRoot = try db.queryOne("SELECT 1 FROM inodes WHERE ino = ?", Catalog.rootIno) { _ in true } ?? false
            if hasRoot { return }
            let now = nowNanoseconds()
            try db.transaction {
                try db.run("INSERT INTO inodes(ino, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns) VALUES (?, ?, ?, ?, 2, ?, ?, ?)",
                           Catalog.rootIno, UInt32(S_IFDIR) | 0o755, getuid(), getgid(), now, now, now)
                for folder in rootFolders {
                    _ = try insertNode(parent: Catalog.rootIno, name: Array(folder.utf8), mode: UInt32(S_IFDIR) | 0o755,
                                       uid: getuid(), gid: getgid(), rdev: 0, target: nil, now: now)
                }
                try db.run("INSERT INTO drive_meta(key, value) VALUES ('created_ns', ?)", now)
            }
        }
    }

}

// MARK: One locked step each

extension Catalog {
    func attributes(_ ino: UInt64) throws -> NodeAttributes { try withDatabase { try $0.node(ino) } }

    func lookup(parent: UInt64, name: [UInt8]) throws -> NodeAttributes {
        try withDatabase { try $0.lookup(parent: parent, name: name) }
    }

    func list(directory ino: UInt64, after offset: Int64, limit: Int) throws -> [DirectoryEntry] {
        try withDatabase { try $0.list(directory: ino, after: offset, limit: limit) }
    }

    func readlink(_ ino: UInt64) throws -> [UInt8] { try withDatabase { try $0.readlink(ino) } }

    func path(of ino: UInt64) throws -> String? { try withDatabase { try $0.path(of: ino) } }

    func create(parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32, rdev: UInt64 = 0, symlinkTarget: [UInt8]? = nil) throws -> NodeAttributes {
        try withDatabase { try $0.create(parent: parent, name: name, mode: mode, uid: uid, gid: gid, rdev: rdev, symlinkTarget: symlinkTarget) }
    }

    func link(ino: UInt64, newParent: UInt64, newName: [UInt8]) throws -> NodeAttributes {
        try withDatabase { try $0.link(ino: ino, newParent: newParent, newName: newName) }
    }

    func remove(parent: UInt64, name: [UInt8], directory: Bool) throws -> UInt64 {
        try withDatabase { try $0.remove(parent: parent, name: name, directory: directory) }
    }

    func deleteIfUnlinked(_ ino: UInt64) throws { try withDatabase { try $0.deleteIfUnlinked(ino) } }

    func sweepOrphans() throws -> Int { try withDatabase { try $0.sweepOrphans() } }

    func rename(parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: UInt32) throws -> UInt64? {
        try withDatabase { try $0.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags) }
    }

    func setAttributes(_ ino: UInt64, _ changes: AttributeChanges) throws -> NodeAttributes {
        try withDatabase { try $0.setAttributes(ino, changes) }
    }

    func setXattr(_ ino: UInt64, name: String, value: [UInt8], create: Bool, replace: Bool) throws {
        try withDatabase { try $0.setXattr(ino, name: name, value: value, create: create, replace: replace) }
    }

    func getXattr(_ ino: UInt64, name: String) throws -> [UInt8] { try withDatabase { try $0.getXattr(ino, name: name) } }

    func mayHaveSecurityAttributes(_ ino: UInt64) throws -> Bool { try withDatabase { try $0.mayHaveSecurityAttributes(ino) } }

    func listXattrs(_ ino: UInt64) throws -> [String] { try withDatabase { try $0.listXattrs(ino) } }

    func removeXattr(_ ino: UInt64, name: String) throws { try withDatabase { try $0.removeXattr(ino, name: name) } }

    func checkpoint() throws { try withDatabase { try $0.checkpoint() } }

    // MARK: On any connection (the caller's own, or the catalog's from a `Locked`)
    fileprivate static let selectColumns = "ino, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, rdev, content, stored"

    fileprivate static func attributes(_ r: Row, from c: Int32 = 0) -> NodeAttributes {
        NodeAttributes(ino: UInt64(r.int64(c)), mode: UInt32(r.int64(c + 1)), uid: UInt32(r.int64(c + 2)),
                       gid: UInt32(r.int64(c + 3)), size: r.int64(c + 4), nlink: UInt32(r.int64(c + 5)),
                       atime: r.int64(c + 6), mtime: r.int64(c + 7), ctime: r.int64(c + 8),
                       rdev: UInt64(bitPattern: r.int64(c + 9)),
                       content: r.string(c + 10).flatMap(SHA256Digest.init(hex:)), stored: r.int64(c + 11))
    }

    /// 4,096 rows of about 120 bytes: the working set of a busy folder, bounded.
    static let attributeCacheLimit = 4096

    /// The same on any connection to a catalog (`BlockAudit` reads an unmounted one).
    static func path(of ino: UInt64, in db: Database) throws -> String? {
        var parts: [String] = []
        var current = ino
        var guardCount = 0
        while current != Catalog.rootIno {
            guard let (parent, name) = try db.queryOne("SELECT parent, name FROM entries WHERE ino = ? ORDER BY id LIMIT 1", current, row: { (UInt64($0.int64(0)), $0.bytes(1) ?? []) }) else {
                return nil
            }
            parts.append(String(decoding: name, as: UTF8.self))
            current = parent
            guardCount += 1
            if guardCount > 4096 { return nil }
        }
        return parts.reversed().joined(separator: "/")
    }

    static func checkName(_ name: [UInt8]) throws {
        if name.count > maxNameLength { throw Errno.nameTooLong }
        if name.isEmpty || name.contains(0x2f) { throw Errno.invalidArgument }
    }

    static let renameNoReplace: UInt32 = 1   // RENAME_NOREPLACE
    static let renameExchange: UInt32 = 2    // RENAME_EXCHANGE

    fileprivate static let securityPrefix = "security."

    /// Copies the committed WAL into the database file without taking the catalog's lock
    /// and without waiting for anyone (PASSIVE: writers go on appending meanwhile), on
    /// the caller's own connection. The flusher calls it after each flush.
    static func checkpointPassively(_ connection: Database) throws {
        try connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
    }

}

extension Catalog.Locked {
    // MARK: Reading

    /// The attributes of an inode: from the cache of recently used rows, else one query.
    /// The kernel asks for the same few inodes many times around each file it writes
    /// (the file, its folder, permission checks between requests); each query is a read
    /// transaction with its own locks.
    func node(_ ino: UInt64) throws -> NodeAttributes {
        if let a = attributeCache[ino] { return a }
        guard let row = try db.queryOne("SELECT \(Catalog.selectColumns) FROM inodes WHERE ino = ?", ino, row: { Catalog.attributes($0) }) else {
            // A file whose creation was in a group the full disk made SQLite drop: the
            // writer still holding it hears why.
            if lostInodes.contains(where: { $0.contains(ino) }) { throw Errno.noSpace }
            throw Errno.noSuchFileOrDirectory
        }
        let a = try heldHere(row)
        if attributeCache.count >= Catalog.attributeCacheLimit { attributeCache.removeAll(keepingCapacity: true) }
        attributeCache[ino] = a
        return a
    }

    private func child(_ parent: UInt64, _ name: [UInt8]) throws -> NodeAttributes? {
        try db.queryOne("SELECT i.ino, i.mode, i.uid, i.gid, i.size, i.nlink, i.atime_ns, i.mtime_ns, i.ctime_ns, i.rdev, i.content, i.stored FROM entries e JOIN inodes i ON i.ino = e.ino WHERE e.parent = ? AND e.name = ?",
                        parent, name, row: { Catalog.attributes($0) }).map { try heldHere($0) }
    }

    /// `a` with `stored` counting only the blocks held here, for a file that names a
    /// block only the server has (optimize storage made it online only): `du` and
    /// `st_blocks` then tell what the file takes on this disk, as for a `Backups/` file.
    /// One query for such files only; every other file is as its row says.
    func heldHere(_ a: NodeAttributes) throws -> NodeAttributes {
        if onlineInodes == nil {
            onlineInodes = Set(try db.query("""
                SELECT DISTINCT f.ino FROM file_blocks f JOIN blocks b ON b.hash = f.hash WHERE b.resident = 0
                """) { UInt64($0.int64(0)) })
        }
        guard a.isRegularFile, onlineInodes?.contains(a.ino) == true else { return a }
        let held = try db.queryOne("""
            SELECT COALESCE(SUM(b.size), 0) FROM file_blocks f JOIN blocks b ON b.hash = f.hash WHERE f.ino = ? AND b.resident = 1
            """, a.ino) { $0.int64(0) } ?? 0
        // Every block back (read again, or rewritten): an ordinary file from now on.
        if held >= a.stored { onlineInodes?.remove(a.ino); return a }
        var out = a
        out.stored = held
        return out
    }

    func lookup(parent: UInt64, name: [UInt8]) throws -> NodeAttributes {
        try Catalog.checkName(name)
        guard let a = try child(parent, name) else {
            _ = try directory(parent)
            throw Errno.noSuchFileOrDirectory
        }
        return a
    }

    private func directory(_ ino: UInt64) throws -> NodeAttributes {
        let a = try node(ino)
        guard a.isDirectory else { throw Errno.notDirectory }
        return a
    }

    /// Entries of a folder after `offset` (0 = from the start), at most `limit`.
    /// Offsets 1 and 2 are "." and ".."; real entries use their id + 2.
    func list(directory ino: UInt64, after offset: Int64, limit: Int) throws -> [DirectoryEntry] {
        let dir = try directory(ino)
        var out: [DirectoryEntry] = []
        if offset < 1 { out.append(DirectoryEntry(offset: 1, name: Array(".".utf8), attributes: dir)) }
        if offset < 2 {
            let parentIno = try db.queryOne("SELECT parent FROM entries WHERE ino = ? LIMIT 1", ino) { UInt64($0.int64(0)) } ?? ino
            var parent = dir
            if parentIno != ino, let p = try? node(parentIno) { parent = p }
            out.append(DirectoryEntry(offset: 2, name: Array("..".utf8), attributes: parent))
        }
        let after = max(offset - 2, 0)
        let rows = try db.query("SELECT e.id, e.name, i.ino, i.mode, i.uid, i.gid, i.size, i.nlink, i.atime_ns, i.mtime_ns, i.ctime_ns, i.rdev, i.content, i.stored FROM entries e JOIN inodes i ON i.ino = e.ino WHERE e.parent = ? AND e.id > ? ORDER BY e.id LIMIT ?",
                                ino, after, limit) { r in
            DirectoryEntry(offset: r.int64(0) + 2, name: r.bytes(1) ?? [], attributes: Catalog.attributes(r, from: 2))
        }.map { DirectoryEntry(offset: $0.offset, name: $0.name, attributes: try heldHere($0.attributes)) }
        out.append(contentsOf: rows)
        return out
    }

    func readlink(_ ino: UInt64) throws -> [UInt8] {
        let a = try node(ino)
        guard a.isSymlink else { throw Errno.invalidArgument }
        return try db.queryOne("SELECT target FROM inodes WHERE ino = ?", ino) { $0.bytes(0) ?? [] } ?? []
    }

    /// The workspace path of an inode (one of its names, for a hard-linked file).
    func path(of ino: UInt64) throws -> String? { try Catalog.path(of: ino, in: db) }

    // MARK: Creating and removing names

    func insertNode(parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32, rdev: UInt64, target: [UInt8]?, now: Int64) throws -> NodeAttributes {
        let isDir = mode & S_IFMT == S_IFDIR
        let size = Int64(target?.count ?? 0)
        let ino = nextIno
        nextIno += 1
        try db.run("INSERT INTO inodes(ino, mode, uid, gid, size, stored, nlink, atime_ns, mtime_ns, ctime_ns, rdev, target) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   ino, mode, uid, gid, size, size, isDir ? 2 : 1, now, now, now, rdev, target)
        try db.run("INSERT INTO entries(parent, name, ino) VALUES (?, ?, ?)", parent, name, ino)
        try touchDirectory(parent, now: now, linkDelta: isDir ? 1 : 0)
        return NodeAttributes(ino: ino, mode: mode, uid: uid, gid: gid, size: size, nlink: isDir ? 2 : 1,
                              atime: now, mtime: now, ctime: now, rdev: rdev, content: nil, stored: size)
    }

    func touchDirectory(_ ino: UInt64, now: Int64, linkDelta: Int = 0) throws {
        try db.run("UPDATE inodes SET mtime_ns = ?, ctime_ns = ?, nlink = nlink + ? WHERE ino = ?", now, now, linkDelta, ino)
    }

    /// Creates a file, folder, symlink or special file. The parent's set-group-ID bit
    /// is inherited, as on ext4.
    func create(parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32, rdev: UInt64 = 0, symlinkTarget: [UInt8]? = nil) throws -> NodeAttributes {
        try Catalog.checkName(name)
        // The checks inside the write transaction: one set of locks for the whole create.
        let a = try write {
            let dir = try directory(parent)
            if dir.nlink == 0 { throw Errno.noSuchFileOrDirectory }
            if try child(parent, name) != nil { throw Errno.fileExists }
            var mode = mode
            var gid = gid
            if dir.mode & UInt32(S_ISGID) != 0 {
                gid = dir.gid
                if mode & S_IFMT == S_IFDIR { mode |= UInt32(S_ISGID) }
            }
            let a = try insertNode(parent: parent, name: name, mode: mode, uid: uid, gid: gid, rdev: rdev, target: symlinkTarget, now: nowNanoseconds())
            try journal(DriveChange(.created, a.ino, catalog: self, madeAs: (parent, name)))
            return a
        }
        attributeCache[a.ino] = a   // the row just written: the kernel asks for it next
        return a
    }

    func link(ino: UInt64, newParent: UInt64, newName: [UInt8]) throws -> NodeAttributes {
        try Catalog.checkName(newName)
        let target = try node(ino)
        if target.isDirectory { throw Errno.notPermitted }
        _ = try directory(newParent)
        if try child(newParent, newName) != nil { throw Errno.fileExists }
        if !journals.isEmpty, let existing = try pathThroughFolders(of: ino), let folder = try pathThroughFolders(of: newParent) {
            let name = String(decoding: newName, as: UTF8.self)
            let new = folder.isEmpty ? name : folder + "/" + name
            if journals.contains(where: { !$0.allowsLink(of: existing, as: new) }) { throw Errno.notPermitted }
        }
        let now = nowNanoseconds()
        try write {
            try db.run("INSERT INTO entries(parent, name, ino) VALUES (?, ?, ?)", newParent, newName, ino)
            try db.run("UPDATE inodes SET nlink = nlink + 1, ctime_ns = ? WHERE ino = ?", now, ino)
            try touchDirectory(newParent, now: now)
            try journal(.created, ino)
        }
        return try node(ino)
    }

    /// Removes a name. Returns the inode it named; the inode itself stays until
    /// the kernel forgets it and no handle is open (see `deleteIfUnreferenced`).
    func remove(parent: UInt64, name: [UInt8], directory wantDirectory: Bool) throws -> UInt64 {
        try Catalog.checkName(name)
        guard let victim = try child(parent, name) else {
            _ = try directory(parent)
            throw Errno.noSuchFileOrDirectory
        }
        if wantDirectory {
            guard victim.isDirectory else { throw Errno.notDirectory }
            if try db.queryOne("SELECT 1 FROM entries WHERE parent = ? LIMIT 1", victim.ino, row: { _ in true }) ?? false {
                throw Errno.notEmpty
            }
        } else if victim.isDirectory {
            throw Errno.isDirectory
        }
        let now = nowNanoseconds()
        try write {
            try unlinkEntry(parent: parent, name: name, victim: victim, now: now)
            try journal(.removed, victim.ino)
        }
        return victim.ino
    }

    func unlinkEntry(parent: UInt64, name: [UInt8], victim: NodeAttributes, now: Int64) throws {
        try db.run("DELETE FROM entries WHERE parent = ? AND name = ?", parent, name)
        if victim.isDirectory {
            folderPaths.removeAll()
            try db.run("UPDATE inodes SET nlink = 0, ctime_ns = ? WHERE ino = ?", now, victim.ino)
            try touchDirectory(parent, now: now, linkDelta: -1)
        } else {
            try db.run("UPDATE inodes SET nlink = max(nlink - 1, 0), ctime_ns = ? WHERE ino = ?", now, victim.ino)
            try touchDirectory(parent, now: now)
        }
    }

    /// Deletes an inode with no names left, once nothing (kernel lookups, open handles)
    /// refers to it; then removes blobs that lost their last reference.
    func deleteIfUnlinked(_ ino: UInt64) throws {
        guard ino != Catalog.rootIno else { return }
        guard let nlink = try db.queryOne("SELECT nlink FROM inodes WHERE ino = ?", ino, row: { $0.int64(0) }), nlink == 0 else { return }
        let garbage = try db.transaction { () -> [SHA256Digest] in
            try db.run("DELETE FROM inodes WHERE ino = ?", ino)
            return try takeUnreferencedBlocks()
        }
        removeBlockFiles(garbage)
    }

    /// Deletes every inode without a name: left by a kill while files were open after unlink.
    func sweepOrphans() throws -> Int {
        let garbage = try db.transaction { () -> [SHA256Digest] in
            try db.run("DELETE FROM inodes WHERE nlink = 0 AND ino != ?", Catalog.rootIno)
            return try takeUnreferencedBlocks()
        }
        removeBlockFiles(garbage)
        return garbage.count
    }

    /// Renames or moves a name, replacing a compatible target unless `RENAME_NOREPLACE`.
    /// Returns the inode that lost its last name by being replaced, if any.
    func rename(parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: UInt32) throws -> UInt64? {
        try Catalog.checkName(name)
        try Catalog.checkName(newName)
        if flags & ~(Catalog.renameNoReplace | Catalog.renameExchange) != 0 { throw Errno.invalidArgument }
        guard let source = try child(parent, name) else { throw Errno.noSuchFileOrDirectory }
        let destinationDir = try directory(newParent)
        if destinationDir.nlink == 0 { throw Errno.noSuchFileOrDirectory }
        let target = try child(newParent, newName)
        if source.isDirectory, try isAncestor(source.ino, of: newParent) { throw Errno.invalidArgument }
        if source.isDirectory || target?.isDirectory == true { folderPaths.removeAll() }
        let now = nowNanoseconds()

        if flags & Catalog.renameExchange != 0 {
            guard let target else { throw Errno.noSuchFileOrDirectory }
            if target.isDirectory, try isAncestor(target.ino, of: parent) { throw Errno.invalidArgument }
            try write {
                try db.run("UPDATE entries SET ino = ? WHERE parent = ? AND name = ?", target.ino, parent, name)
                try db.run("UPDATE entries SET ino = ? WHERE parent = ? AND name = ?", source.ino, newParent, newName)
                if parent != newParent && source.isDirectory != target.isDirectory {
                    let delta = source.isDirectory ? 1 : -1
                    try touchDirectory(newParent, now: now, linkDelta: delta)
                    try touchDirectory(parent, now: now, linkDelta: -delta)
                } else {
                    try touchDirectory(parent, now: now)
                    try touchDirectory(newParent, now: now)
                }
                try db.run("UPDATE inodes SET ctime_ns = ? WHERE ino IN (?, ?)", now, source.ino, target.ino)
                try journal(.renamed, source.ino)
                try journal(.renamed, target.ino)
            }
            return nil
        }

        var replaced: UInt64?
        if let target {
            if target.ino == source.ino { return nil }   // two names of one inode: POSIX says do nothing
            if flags & Catalog.renameNoReplace != 0 { throw Errno.fileExists }
            if source.isDirectory {
                guard target.isDirectory else { throw Errno.notDirectory }
                if try db.queryOne("SELECT 1 FROM entries WHERE parent = ? LIMIT 1", target.ino, row: { _ in true }) ?? false {
                    throw Errno.notEmpty
                }
            } else if target.isDirectory {
                throw Errno.isDirectory
            }
        }
        try write {
            if let target {
                try unlinkEntry(parent: newParent, name: newName, victim: target, now: now)
                try journal(.removed, target.ino)
                replaced = target.ino
            }
            try db.run("UPDATE entries SET parent = ?, name = ? WHERE parent = ? AND name = ?", newParent, newName, parent, name)
            if source.isDirectory && parent != newParent {
                try touchDirectory(parent, now: now, linkDelta: -1)
                try touchDirectory(newParent, now: now, linkDelta: 1)
            } else {
                try touchDirectory(parent, now: now)
                if newParent != parent { try touchDirectory(newParent, now: now) }
            }
            try db.run("UPDATE inodes SET ctime_ns = ? WHERE ino = ?", now, source.ino)
            try journal(.renamed, source.ino)
        }
        return replaced
    }

    /// Walks from `ino` up to the root, however deep: a bounded walk would let a rename
    /// in a deeper tree move a folder into its own subtree. A folder has one name, so
    /// the walk is one path and ends at the root; a folder met twice means the catalog
    /// is damaged, and the rename fails with EIO rather than guess.
    func isAncestor(_ ancestor: UInt64, of ino: UInt64) throws -> Bool {
        var current = ino
        var seen: Set<UInt64> = []
        while current != ancestor {
            if current == Catalog.rootIno { return false }
            guard seen.insert(current).inserted else {
                DriveLog.error("the catalog is damaged: folder \(current) is its own ancestor, so a rename under it fails with EIO")
                throw Errno.ioError
            }
            guard let parent = try db.queryOne("SELECT parent FROM entries WHERE ino = ? LIMIT 1", current, row: { UInt64($0.int64(0)) }) else { return false }
            current = parent
        }
        return true
    }

    // MARK: Attributes

    /// Applies chmod/chown/utimens changes (size changes go through `commit`).
    func setAttributes(_ ino: UInt64, _ changes: AttributeChanges) throws -> NodeAttributes {
        let before = try node(ino)
        var a = before
        changes.apply(to: &a)
        a.ctime = nowNanoseconds()
        // What a follower keeps (the mode, the modification time) told with the change.
        let followed = !journals.isEmpty && (a.mode != before.mode || a.mtime != before.mtime)
        try write {
            try db.run("UPDATE inodes SET mode = ?, uid = ?, gid = ?, atime_ns = ?, mtime_ns = ?, ctime_ns = ? WHERE ino = ?",
                       a.mode, a.uid, a.gid, a.atime, a.mtime, a.ctime, ino)
            if followed { try journal(.attributes, ino) }
        }
        return a
    }

    // MARK: Extended attributes

    func setXattr(_ ino: UInt64, name: String, value: [UInt8], create: Bool, replace: Bool) throws {
        _ = try node(ino)
        let exists = try db.queryOne("SELECT 1 FROM xattrs WHERE ino = ? AND name = ?", ino, name, row: { _ in true }) ?? false
        if create && exists { throw Errno.fileExists }
        if replace && !exists { throw Errno.noData }
        if name.hasPrefix(Catalog.securityPrefix) {
            _ = try securityXattrInodes()
            securityInodes?.insert(ino)
        }
        try db.transaction {
            try db.run("INSERT INTO xattrs(ino, name, value) VALUES (?, ?, ?) ON CONFLICT(ino, name) DO UPDATE SET value = excluded.value", ino, name, value)
            try db.run("UPDATE inodes SET ctime_ns = ? WHERE ino = ?", nowNanoseconds(), ino)
        }
    }

    func getXattr(_ ino: UInt64, name: String) throws -> [UInt8] {
        _ = try node(ino)
        // The kernel asks for security.capability before every write and chown of a
        // file (to clear file capabilities); almost no file has one.
        if name.hasPrefix(Catalog.securityPrefix), try !securityXattrInodes().contains(ino) { throw Errno.noData }
        guard let v = try db.queryOne("SELECT value FROM xattrs WHERE ino = ? AND name = ?", ino, name, row: { $0.bytes(0) ?? [] }) else {
            throw Errno.noData
        }
        return v
    }

    /// False when the inode surely has no `security.*` attribute (from memory).
    func mayHaveSecurityAttributes(_ ino: UInt64) throws -> Bool {
        try securityXattrInodes().contains(ino)
    }

    /// The inodes that may have a `security.*` attribute, read once. Only this connection
    /// writes attributes, so it stays a superset: setting one adds its inode; removals
    /// and deletions leave it (a later lookup then asks the table).
    private func securityXattrInodes() throws -> Set<UInt64> {
        if let known = securityInodes { return known }
        let rows = try db.query("SELECT DISTINCT ino FROM xattrs WHERE name >= 'security.' AND name < 'security/'") { UInt64($0.int64(0)) }
        securityInodes = Set(rows)
        return securityInodes!
    }

    func listXattrs(_ ino: UInt64) throws -> [String] {
        _ = try node(ino)
        return try db.query("SELECT name FROM xattrs WHERE ino = ? ORDER BY name", ino) { $0.string(0) ?? "" }
    }

    func removeXattr(_ ino: UInt64, name: String) throws {
        _ = try node(ino)
        if try db.run("DELETE FROM xattrs WHERE ino = ? AND name = ?", ino, name) == 0 { throw Errno.noData }
    }

    func checkpoint() throws {
        try commitGroup()
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }
}
