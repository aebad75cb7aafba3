import Foundation
import Crypto
import Storage
import CLinux

/// The workspace file system in Swift terms: every FUSE operation as a method that
/// returns a value or throws (an `Errno`, a `DatabaseError`). The FUSE adapter
/// (Fuse*.swift) is a thin layer over this class, and tier-one tests call it
/// directly, without a kernel.
///
/// State: the catalog (SQLite), the blob store, the open nodes and handles, and
/// the kernel's lookup counts. Lock order: `OpenNode.lock` → `Catalog` lock;
/// `tables` is a leaf lock, never held while calling out.
/// `@unchecked Sendable`: mutable tables are guarded by `tables`.
public final class DriveFileSystem: @unchecked Sendable {
    let catalog: Catalog
    let blobs: BlobStore
    let durability: Durability
    public let statePath: String

    private let tables = NSLock()
    private var openNodes: [UInt64: OpenNode] = [:]
    private var handles: [UInt64: FileHandle] = [:]
    private var nextHandle: UInt64 = 1
    private var lookups: [UInt64: UInt64] = [:]
    /// The generated read-only trees at the workspace root (`.backup`, `Backups`) and
    /// the `user.vdrive.*` attributes of real files. Set before the mount serves.
    public var virtualTrees: [VirtualTree] = []
    /// The first tree (the `.backup` tree), for callers that set one.
    public var virtualTree: VirtualTree? {
        get { virtualTrees.first }
        set { virtualTrees = (newValue.map { [$0] } ?? []) + virtualTrees.dropFirst() }
    }
    let virtualInodes = VirtualInodes()
    /// Open virtual files: a snapshot of a generated file's content taken at open, so
    /// reads are consistent; or the backed-up content a `Backups/` file showed at open.
    private var virtualHandles: [UInt64: VirtualHandle] = [:]
    /// How `Backups/` files get their bytes (block lists, remote blocks); nil: reads fail with EIO.
    public var remoteReads: RemoteReads?

    /// Counters for tests and benchmarks.
    public struct Statistics: Sendable {
        /// Blocks whose digest came from the running hash of in-order writes.
        public var blocksHashedWhileWriting = 0
        /// Blocks read back once at commit (written out of order, or partly rewritten).
        public var blocksHashedByReading = 0
    }
    private var stats = Statistics()
    public var statistics: Statistics { tables.withLock { stats } }

    /// Blocks not held here (online-only, damaged, or another device's): fetched from
    /// the server through `blockCache.remote`, verified, and kept.
    public let blockCache: BlockCache

    /// Opens (or creates) the workspace state in `statePath`: `catalog.sqlite` and `blobs/`.
    /// `extraMigrations` are the tables other pieces keep in the catalog (the backup queue);
    /// `rootFolders`, the folders a new workspace starts with (the camera backup's folder).
    public init(statePath: String, extraMigrations: [Migration] = [], rootFolders: [String] = [],
                flushInterval: TimeInterval = 1.0) throws {
        self.statePath = statePath
        blobs = try BlobStore(root: statePath + "/blobs")
        catalog = try Catalog(path: statePath + "/catalog.sqlite", blobs: blobs, extraMigrations: extraMigrations,
                              rootFolders: rootFolders)
        durability = Durability(catalog: catalog, blobs: blobs, interval: flushInterval)
        blockCache = try BlockCache(catalog: catalog, blobs: blobs)
        catalog.withDatabaseUnchecked { $0.hasWriters = { [unowned self] ino in hasWriters(ino) } }
    }

    /// Whether a writable handle is open on the inode (its content is not settled). Takes
    /// only the tables lock, a leaf: the catalog asks it under its own lock.
    public func hasWriters(_ ino: UInt64) -> Bool { tables.withLock { (openNodes[ino]?.writers ?? 0) > 0 } }

    /// Called when the kernel's cached pages and size of an inode no longer match the
    /// catalog (a rolled-back write); the FUSE layer tells the kernel to drop them.
    var kernelCacheIsStale: (@Sendable (UInt64) -> Void)?
    /// Called when a name changed behind the kernel's back (`applyExternal`): the FUSE
    /// layer tells the kernel to drop its cached entry (and cached absence).
    var kernelEntryIsStale: (@Sendable (UInt64, [UInt8]) -> Void)?

    /// Called after `CacheBound.pinAttribute` was set or removed on an inode: the daemon's
    /// wiring fetches what became pinned (PinnedContent.swift). Set before the mount serves.
    public var pinsChanged: (@Sendable () -> Void)?

    /// Adds a follower of every change the kernel makes (ChangeJournal.swift): the mirror,
    /// the camera backup. Before the mount serves.
    public func addFollower(_ journal: ChangeJournal) {
        catalog.withDatabaseUnchecked { $0.journals.append(journal) }
    }

    /// Runs the checks a mount needs before serving: leftovers of a kill, and after an
    /// unclean stop, the blobs newer than the last durable point. Returns the paths of
    /// files whose content was found missing or wrong.
    public func recover() throws -> [String] {
        blobs.clearStaging()
        let wasClean = (try catalog.meta("clean_unmount") ?? 1) == 1
        try catalog.setMeta("clean_unmount", 0)
        _ = try catalog.sweepOrphans()
        try catalog.collectGarbage()
        try blockCache.recover(afterUncleanStop: !wasClean)
        if !wasClean {
            _ = try catalog.sweepUnknownBlockFiles()
            let lost = try durability.verifyAfterUncleanStop()
            for path in lost {
                DriveLog.error("content of '\(path)' was lost in an unclean stop (power loss?): the damaged part is fetched again from the server when it has it, else its reads fail with EIO")
            }
        }
        let damaged = try catalog.damagedBlocks()
        blockCache.setDamaged(damaged)
        return damaged.isEmpty ? [] : try damaged.flatMap { try catalog.pathsUsing($0) }
    }

    /// Starts the flusher and the group commit (`groupCommitWindow` 0: a commit per change).
    public func startBackgroundWork(groupCommitWindow: TimeInterval = DriveFileSystem.defaultGroupCommitWindow) {
        durability.start()
        catalog.startGroupCommits(window: groupCommitWindow)
    }

    /// How long a change may wait for the commit it shares with the changes after it,
    /// unless a follower asks for it at once (see GroupCommit.swift): 10 ms, or `VDRIVE_COMMIT_WINDOW_MS`
    /// (0: every change is committed before its reply, as before group commit).
    public static let defaultGroupCommitWindow: TimeInterval = {
        if let text = ProcessInfo.processInfo.environment["VDRIVE_COMMIT_WINDOW_MS"], let ms = Double(text), ms >= 0 {
            return min(ms, 1000) / 1000
        }
        return 0.010
    }()

    /// Every migration a catalog opened with these extras carries, in order.
    public static func catalogMigrations(extra: [Migration]) -> [Migration] { CatalogSchema.migrations + RecordsTable.migrations + extra }

    /// The catalog database's path (other pieces open their own connections to it).
    public var catalogPath: String { catalog.databasePath }

    /// The content-addressed block store of this workspace (`<state>/blobs`).
    public var blobStore: BlobStore { blobs }

    /// Followers' reads of what is committed (ExternalChanges.swift).
    let committedReads = CommittedReads()

    /// Removes blocks that lost their last reference through another connection.
    public func collectGarbage() { try? catalog.collectGarbage() }

    /// Commits what is still open, makes everything durable and records a clean stop.
    public func shutdown() {
        let nodes: [OpenNode] = tables.withLock { Array(openNodes.values) }
        for node in nodes { try? commit(node) }
        blockCache.flushUses()
        catalog.stopGroupCommits()
        durability.stop()
        try? catalog.checkpoint()
        try? catalog.setMeta("clean_unmount", 1)
        try? catalog.checkpoint()
    }

    // MARK: Lookup counts

    /// Records one more kernel reference to an inode (every entry reply does this).
    func remember(_ ino: UInt64) {
        if VirtualInodes.contains(ino) { return }
        tables.withLock { lookups[ino, default: 0] += 1 }
    }

    public func forget(_ ino: UInt64, count: UInt64) {
        if VirtualInodes.contains(ino) { return }   // virtual inodes live as long as the process
        let remaining: UInt64 = tables.withLock {
            let current = lookups[ino] ?? 0
            precondition(current >= count, "forget(\(ino), \(count)) with only \(current) lookups: lookup counting is broken")
            let left = current - count
            if left == 0 { lookups[ino] = nil } else { lookups[ino] = left }
            return left
        }
        if remaining == 0 { releaseIfUnused(ino) }
    }

    func releaseIfUnused(_ ino: UInt64) {
        let inUse = tables.withLock { lookups[ino] != nil || openNodes[ino] != nil }
        if !inUse { try? catalog.deleteIfUnlinked(ino) }
    }

    // MARK: Attributes

    /// Catalog attributes, with size and times from an open draft when one is being written.
    func withLiveContent(_ a: NodeAttributes) -> NodeAttributes {
        guard a.isRegularFile, let node = tables.withLock({ openNodes[a.ino] }) else { return a }
        return node.lock.withLock {
            // Read the row again under the node's lock: a commit (a flush, or a release on
            // another thread) may have landed since `a` was read, and taken its draft with
            // it; the old row and no draft would hand the kernel a stale size for the whole
            // attribute timeout (found by StressTests, seed 44, four writers).
            var a = (try? catalog.attributes(a.ino)) ?? a
            if let d = node.draft, d.changed {
                d.attributes.apply(to: &a)
                a.size = d.size
                a.stored = Set(d.stored.keys).union(d.dirty.keys).reduce(0) { $0 + Int64(Blocks.length(ofBlock: $1, fileSize: d.size)) }
                a.mtime = d.mtime
                if let c = d.ctime { a.ctime = max(a.ctime, c) }
            }
            return a
        }
    }

    public func lookup(parent: UInt64, name: [UInt8]) throws -> NodeAttributes {
        if let v = virtualChildPath(parent: parent, name: name) { return try virtualAttributes(v) }
        let a = withLiveContent(try catalog.lookup(parent: parent, name: name))
        remember(a.ino)
        return a
    }

    public func getattr(_ ino: UInt64) throws -> NodeAttributes {
        if VirtualInodes.contains(ino) {
            guard let v = virtualPath(of: ino) else { throw Errno.noSuchFileOrDirectory }
            return try virtualAttributes(v)
        }
        return withLiveContent(try catalog.attributes(ino))
    }

    /// `callerUid`: who asks (a truncate by anyone but root clears setuid; Privileges.swift).
    public func setattr(_ ino: UInt64, _ changes: AttributeChanges, handle: UInt64?, callerUid: UInt32 = 0) throws -> NodeAttributes {
        try refuseVirtual(ino)
        var current = try catalog.attributes(ino)
        if let size = changes.size {
            if current.isDirectory { throw Errno.isDirectory }
            guard current.isRegularFile else { throw Errno.invalidArgument }
            if size < 0 { throw Errno.invalidArgument }
            try truncate(ino, to: size, handle: handle, callerUid: callerUid)
        }
        var rest = changes
        rest.size = nil
        if rest.uid != nil || rest.gid != nil, let mode = try modeForOwnerChange(getattr(ino), rest) { rest.mode = mode }
        if !rest.isEmpty && !deferToDraft(ino, rest) {
            current = try catalog.setAttributes(ino, rest)
            if let mtime = rest.mtime, let node = tables.withLock({ openNodes[ino] }) {
                node.lock.withLock { node.draft?.mtime = mtime }
            }
        }
        durability.noteMetadataChanged()
        return withLiveContent(try catalog.attributes(ino))
    }

    /// chmod, chown and utimens of a file being written wait in its draft: shown at once
    /// by every attribute reply, committed with the content at close, in the same
    /// transaction (tar and cp -p set all three on every file: three transactions per
    /// file saved). A kill before the close loses them with the content they came with.
    /// False when there is no changed draft (the change is then its own transaction).
    private func deferToDraft(_ ino: UInt64, _ changes: AttributeChanges) -> Bool {
        guard let node = tables.withLock({ openNodes[ino] }) else { return false }
        return node.lock.withLock {
            guard let d = node.draft, d.changed, d.failure == nil else { return false }
            d.attributes.merge(changes)
            if let mtime = changes.mtime { d.mtime = mtime }
            d.ctime = nowNanoseconds()
            return true
        }
    }

    /// A draft that will never be committed (a failed write, a failed last commit) still
    /// carries attribute changes the caller was told succeeded: they are applied alone.
    private func keepAttributes(of d: Draft, _ ino: UInt64) {
        guard !d.attributes.isEmpty else { return }
        do { _ = try catalog.setAttributes(ino, d.attributes) } catch {
            DriveLog.error("the mode, owner or times of inode \(ino) could not be saved: \(error)")
        }
        d.attributes = AttributeChanges()
    }

    private func truncate(_ ino: UInt64, to size: Int64, handle: UInt64?, callerUid: UInt32) throws {
        let open = tables.withLock { openNodes[ino] }
        let node = open ?? OpenNode(ino: ino)
        try node.lock.withLock {
            let d = try draftForWrite(node)
            try dropPrivilegesForChange(d, ino: ino, callerUid: callerUid)
            try resize(d, to: size)
            let now = nowNanoseconds()
            d.changed = true
            d.mtime = now
            d.ctime = now   // ftruncate(2) changes ctime at once, not at the next close
        }
        guard open == nil else {
            // truncate(2) by path takes effect at once; through an open handle, at flush.
            if handle == nil { try commit(node) }
            return
        }
        defer { node.lock.withLock { node.draft?.discard(); node.draft = nil } }
        try commit(node)
    }

    // MARK: Names

    public func create(parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32, rdev: UInt64 = 0) throws -> NodeAttributes {
        try refuseVirtual(parent: parent, name: name)
        let a = try catalog.create(parent: parent, name: name, mode: mode, uid: uid, gid: gid, rdev: rdev)
        durability.noteMetadataChanged()
        remember(a.ino)
        return a
    }

    public func symlink(parent: UInt64, name: [UInt8], target: [UInt8], uid: UInt32, gid: UInt32) throws -> NodeAttributes {
        if target.count > 4095 { throw Errno.nameTooLong }
        try refuseVirtual(parent: parent, name: name)
        let a = try catalog.create(parent: parent, name: name, mode: UInt32(S_IFLNK) | 0o777, uid: uid, gid: gid, symlinkTarget: target)
        durability.noteMetadataChanged()
        remember(a.ino)
        return a
    }

    public func readlink(_ ino: UInt64) throws -> [UInt8] { try catalog.readlink(ino) }

    public func link(_ ino: UInt64, newParent: UInt64, newName: [UInt8]) throws -> NodeAttributes {
        try refuseVirtual(ino)
        try refuseVirtual(parent: newParent, name: newName)
        let a = withLiveContent(try catalog.link(ino: ino, newParent: newParent, newName: newName))
        durability.noteMetadataChanged()
        remember(a.ino)
        return a
    }

    public func unlink(parent: UInt64, name: [UInt8]) throws {
        try refuseVirtualRemoval(parent: parent, name: name)
        let ino = try catalog.remove(parent: parent, name: name, directory: false)
        durability.noteMetadataChanged()
        releaseIfUnused(ino)
    }

    public func rmdir(parent: UInt64, name: [UInt8]) throws {
        try refuseVirtualRemoval(parent: parent, name: name)
        let ino = try catalog.remove(parent: parent, name: name, directory: true)
        durability.noteMetadataChanged()
        releaseIfUnused(ino)
    }

    public func rename(parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: UInt32) throws {
        try refuseVirtualRemoval(parent: parent, name: name)
        try refuseVirtualRemoval(parent: newParent, name: newName)
        let replaced = try catalog.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
        durability.noteMetadataChanged()
        if let replaced { releaseIfUnused(replaced) }
    }

    /// Where the virtual trees' entries start in the root listing: after every catalog entry.
    static let virtualRootOffset = Int64.max - 16

    public func readdir(_ ino: UInt64, after offset: Int64, limit: Int) throws -> [DirectoryEntryInfo] {
        if VirtualInodes.contains(ino) { return try virtualReaddir(ino, after: offset, limit: limit) }
        if offset >= Self.virtualRootOffset {
            return ino == Catalog.rootIno ? try virtualRootEntries(after: offset) : []
        }
        var out = try catalog.list(directory: ino, after: offset, limit: limit).map {
            DirectoryEntryInfo(offset: $0.offset, name: $0.name, attributes: $0.attributes)
        }
        if ino == Catalog.rootIno, out.count < limit {
            out += try virtualRootEntries(after: offset).prefix(limit - out.count)
        }
        return out
    }

    // MARK: Open files

    private func openNode(_ ino: UInt64) -> OpenNode {
        tables.withLock {
            if let n = openNodes[ino] { n.handles += 1; return n }
            let n = OpenNode(ino: ino)
            n.handles = 1
            openNodes[ino] = n
            return n
        }
    }

    private func addHandle(_ node: OpenNode, writable: Bool) -> UInt64 {
        tables.withLock {
            if writable { node.writers += 1 }
            let fh = nextHandle
            nextHandle += 1
            handles[fh] = FileHandle(node: node, writable: writable)
            return fh
        }
    }

    func handle(_ fh: UInt64) throws -> FileHandle {
        guard let h = tables.withLock({ handles[fh] }) else { throw Errno.badFileDescriptor }
        return h
    }

    /// Opens a file. With `truncate` (O_TRUNC) the new content starts empty in a
    /// draft; the previous content stays until the next commit.
    public func open(_ ino: UInt64, writable: Bool, truncate: Bool, callerUid: UInt32 = 0) throws -> UInt64 {
        if VirtualInodes.contains(ino) { return try openVirtual(ino, writable: writable) }
        let a = try catalog.attributes(ino)
        if a.isDirectory { throw Errno.isDirectory }
        guard a.isRegularFile else { throw Errno.invalidArgument }
        let node = openNode(ino)
        if writable && truncate {
            do {
                try node.lock.withLock {
                    let d = try draftForWrite(node)
                    try dropPrivilegesForChange(d, ino: ino, callerUid: callerUid)
                    try resize(d, to: 0)
                    d.changed = true
                    d.mtime = nowNanoseconds()
                }
            } catch {
                closeNode(node)
                throw error
            }
        }
        return addHandle(node, writable: writable)
    }

    private func openVirtual(_ ino: UInt64, writable: Bool) throws -> UInt64 {
        if writable { throw Errno(EROFS) }
        guard let v = virtualPath(of: ino), let node = v.tree.node(at: v.path) else { throw Errno.noSuchFileOrDirectory }
        let handle: VirtualHandle
        switch node {
        case .directory: throw Errno.isDirectory
        case .generated(let content): handle = .generated(content)
        case .remote(let file): handle = .remote(RemoteHandle(file))
        }
        return tables.withLock {
            let fh = nextHandle
            nextHandle += 1
            virtualHandles[fh] = handle
            return fh
        }
    }

    /// True when reading the open file `fh` may need the server: some block of its
    /// content is not held here (an online-only photo, a `Backups/` file not read before).
    func readsFromTheServer(_ fh: UInt64) -> Bool {
        do {
            if let v = tables.withLock({ virtualHandles[fh] }) {
                guard case .remote(let r) = v else { return false }
                guard let list = try remoteReads?.table.blockList(of: r.file.content) else { return true }
                let needed = list.enumerated().filter { i, d in !Blocks.isZero(d, length: Blocks.length(ofBlock: i, fileSize: r.file.size)) }
                return try !catalog.holdsAll(Set(needed.map(\.element)))
            }
            // Asked through the open file's block list, which its reads use next.
            let node = try handle(fh).node
            return try node.lock.withLock {
                _ = try loadCommitted(node)
                return !node.notHeld.isEmpty
            }
        } catch {
            return false   // the read itself will report what is wrong
        }
    }

    /// An open file's committed size and block list, and which of its blocks were not
    /// held here then: loaded once (one step under the catalog's lock), cached until the
    /// next commit drops them. Called with `node.lock` held.
    private func loadCommitted(_ node: OpenNode) throws -> [Int: SHA256Digest] {
        if let committed = node.committed { return committed }
        let loaded = try catalog.committedContent(node.ino)
        (node.committedSize, node.committed, node.notHeld) = (loaded.size, loaded.blocks, loaded.notHeld)
        return loaded.blocks
    }

    /// True for an open generated file (`.backup/status`): its size changes under it.
    func isGeneratedHandle(_ fh: UInt64) -> Bool {
        if case .generated? = tables.withLock({ virtualHandles[fh] }) { return true }
        return false
    }

    /// Creates and opens a new, empty file.
    public func createAndOpen(parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32) throws -> (NodeAttributes, UInt64) {
        let a = try create(parent: parent, name: name, mode: UInt32(S_IFREG) | (mode & 0o7777), uid: uid, gid: gid)
        let node = openNode(a.ino)
        // Empty and new: its draft needs nothing from the catalog (the first write
        // would otherwise read the row and the block list back).
        node.lock.withLock { if node.draft == nil { node.draft = Draft(stored: [:], size: 0) } }
        return (a, addHandle(node, writable: true))
    }

    // MARK: Content in blocks

    /// The draft of `node`, made on first need from the committed block list.
    /// Called with `node.lock` held.
    private func draftForWrite(_ node: OpenNode) throws -> Draft {
        if let d = node.draft { return d }
        let a = try catalog.attributes(node.ino)
        let d = Draft(stored: try catalog.storedBlocks(node.ino), size: a.size)
        node.draft = d
        return d
    }

    /// Block `index` of a draft as a staging file of `length` bytes, made on first need:
    /// a copy of the stored block (a reflink where the disk can) unless the caller is
    /// about to overwrite all of it, else zeros. At most one block is ever copied.
    private func dirtyBlock(_ d: Draft, _ index: Int, length: Int, overwritten: Bool) throws -> DirtyBlock {
        if let b = d.dirty[index] { return b }
        let b: DirtyBlock
        if index == 0 && d.size <= Int64(InlineBlocks.limit) {
            // A small file's only block is staged in memory: no inode on the disk for it,
            // now or at commit (InlineBlocks.swift).
            var bytes: [UInt8] = []
            if !overwritten, let digest = d.stored[index] {
                bytes = [UInt8](repeating: 0, count: length)
                let source = try openBlock(digest)
                defer { FileIO.close(source) }
                try bytes.withUnsafeMutableBytes { try readFully(source, into: $0, at: 0) }
            } else if !overwritten {
                bytes = [UInt8](repeating: 0, count: length)
            }
            b = DirtyBlock(memory: bytes, store: blobs, hashed: overwritten || d.stored[index] == nil)
        } else {
            let (fd, path) = try blobs.takeStagingFile()
            var copied = false
            do {
                if !overwritten, let digest = d.stored[index] {
                    let source = try openBlock(digest)
                    defer { FileIO.close(source) }
                    if vd_clone_file(fd, source) != 0 {
                        try FileIO.copyPreservingHoles(from: source, to: fd, length: Int64(Blocks.length(ofBlock: index, fileSize: d.size)))
                    }
                    copied = true
                }
                // A write about to cover the whole block sets its length itself.
                if copied || !overwritten { try FileIO.ftruncate(fd, Int64(length)) }
            } catch {
                blobs.returnStagingFile(fd: fd, path: path)
                throw error
            }
            b = DirtyBlock(fd: fd, path: path, store: blobs, hashed: !copied)
        }
        d.dirty[index] = b
        d.stored[index] = nil
        return b
    }

    /// Changes a draft's size. Only the block holding the old or the new end is touched
    /// (shortened or zero-extended); blocks past a shorter end are dropped; growing adds
    /// holes, which cost nothing.
    /// `writeStart`: the offset of the write that grows the file, which then extends the
    /// last block's staging file itself when it starts in that block (no ftruncate).
    private func resize(_ d: Draft, to newSize: Int64, writeStart: Int64? = nil) throws {
        let oldSize = d.size
        if newSize == oldSize { return }
        let oldCount = Blocks.count(forSize: oldSize)
        let newCount = Blocks.count(forSize: newSize)
        if newSize < oldSize {
            for i in newCount..<max(oldCount, newCount) {
                d.dirty.removeValue(forKey: i)?.discard()
                d.stored[i] = nil
                d.cleared.insert(i)
            }
        }
        // The block that holds the shorter of the two ends changes length.
        let edge = (newSize < oldSize ? newCount : oldCount) - 1
        if edge >= 0 {
            let oldLength = Blocks.length(ofBlock: edge, fileSize: oldSize)
            let newLength = Blocks.length(ofBlock: edge, fileSize: newSize)
            let extendedByTheWrite = newSize > oldSize && d.dirty[edge] != nil
                && writeStart.map { $0 < Int64(edge + 1) * Int64(Blocks.size) } == true
            if oldLength != newLength && (d.stored[edge] != nil || d.dirty[edge] != nil) && !extendedByTheWrite {
                let b = try dirtyBlock(d, edge, length: oldLength, overwritten: false)
                try b.truncate(to: newLength)
                if b.hashedUpTo > newLength { b.hasher = nil }
            }
        }
        // Last: the edge block above may just have been staged in memory (a small file's
        // only block, appended to or truncated up past the limit in one step).
        if newSize > Int64(InlineBlocks.limit), let b = d.dirty[0], b.inMemory { try b.moveToDisk() }
        d.size = newSize
    }

    /// A stored block's descriptor; a block not held here (online-only, damaged) is
    /// fetched whole first (a write copying it, a read of a file being written).
    private func openBlock(_ digest: SHA256Digest) throws -> Int32 {
        if let fd = try openIfResident(digest) { return fd }
        guard let length = try catalog.blockLength(digest) else {
            DriveLog.error("block \(digest.hex) is missing from \(blobs.root) and the catalog: reads of its file fail with EIO")
            throw Errno.ioError
        }
        let shared = try blockCache.descriptor(digest, length: length, range: 0..<length, interactive: true, whole: true)
        let fd = dup(shared.fd)
        if fd < 0 { throw Errno.current }
        return fd
    }

    /// The stored block's descriptor when it is here and sound, else nil.
    private func openIfResident(_ digest: SHA256Digest) throws -> Int32? { try blockCache.openHeld(digest) }

    /// One piece of a read reply: bytes of a stored block (spliced by the FUSE layer),
    /// checked bytes of a block just fetched (still in memory), or zeros (a hole).
    enum ReadPiece {
        case block(SharedDescriptor, offset: Int64, length: Int)
        case memory(any ReplyBytes, offset: Int, length: Int)
        case zeros(Int)
    }

    /// Where the bytes of a read come from: copied out already (virtual files, a file
    /// being written), or immutable stored blocks and holes the FUSE layer splices.
    enum ReadSource {
        case bytes(Int)
        case pieces([ReadPiece])
    }

    /// Splits [offset, offset+count) of a file of `size` bytes into per-block pieces.
    static func blockSpans(offset: Int64, count: Int, size: Int64) -> [(index: Int, inBlock: Int, length: Int)] {
        var spans: [(Int, Int, Int)] = []
        var pos = offset
        let end = min(size, offset + Int64(count))
        while pos < end {
            let index = Int(pos / Int64(Blocks.size))
            let inBlock = Int(pos % Int64(Blocks.size))
            let length = Int(min(Int64(Blocks.size - inBlock), end - pos))
            spans.append((index, inBlock, length))
            pos += Int64(length)
        }
        return spans
    }

    /// Resolves a read: fills `buffer` from a virtual file or a draft, or returns the
    /// committed blocks' pieces without reading them.
    /// `buffer` is asked for only when bytes must be copied (a committed file's blocks
    /// are spliced, so its reads never allocate one).
    func readSource(_ fh: UInt64, count: Int, at offset: Int64,
                    buffer makeBuffer: () -> UnsafeMutableRawBufferPointer) throws -> ReadSource {
        switch tables.withLock({ virtualHandles[fh] }) {
        case .generated(let content)?:
            guard offset < content.count else { return .bytes(0) }
            let buffer = makeBuffer()
            let n = min(buffer.count, content.count - Int(offset))
            content.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + Int(offset), byteCount: n) }
            return .bytes(n)
        case .remote(let handle)?:
            return try readRemote(handle, count: count, at: offset)
        case nil:
            break
        }
        let node = try handle(fh).node
        // The window's chunks in blocks past the read's (fetched after its own pieces).
        var ahead: [(SHA256Digest, Int, Range<Int>)] = []
        let planned: [PlannedPiece] = try node.lock.withLock {
            if let d = node.draft, d.changed {
                return [.copied(try readDraft(node, d, into: makeBuffer(), at: offset))]
            }
            let committed = try loadCommitted(node)
            let size = node.committedSize
            let spans = Self.blockSpans(offset: offset, count: count, size: size)
            // Blocks not held here: the chunks of the read and of the open file's window,
            // which ramps while the reader goes on in order (ReadaheadWindow.swift), up to
            // whole blocks and the next ones fetched ahead. A program reading a file's
            // first bytes (a thumbnailer, `file`, `head -c`) fetches the chunks they cover.
            let plan = offset < size ? node.window.plan(offset: offset, count: count, size: size)
                : ReadaheadWindow.Plan(fetch: 0..<0, wholeBlocks: false)
            // Stored blocks: a reader continuing where its last read ended, with more than
            // two chunks read in order, gets the next block asked of the disk ahead.
            let continues = offset > 0 && offset == node.sequentialEnd
            node.sequentialRun = continues ? node.sequentialRun + Int64(count) : Int64(count)
            let sequential = continues && node.sequentialRun > Int64(2 * Blocks.chunkSize)
            let planned: [PlannedPiece] = try spans.map { span in
                guard let digest = committed[span.index] else { return .ready(.zeros(span.length)) }
                if let m = blockCache.fetched.take(digest, span.inBlock..<(span.inBlock + span.length)) {
                    return .ready(.memory(m, offset: span.inBlock, length: span.length))
                }
                if !node.notHeld.contains(digest) {
                    let length = Blocks.length(ofBlock: span.index, fileSize: size)
                    if let b = try inlineReader(node, digest, length: length) {
                        return .ready(.memory(b, offset: span.inBlock, length: span.length))
                    }
                    if let fd = try residentReader(node, digest, inlineChecked: length <= InlineBlocks.limit) {
                        return .ready(.block(fd, offset: Int64(span.inBlock), length: span.length))
                    }
                }
                return .remote(digest, blockLength: Blocks.length(ofBlock: span.index, fileSize: size),
                               inBlock: span.inBlock, length: span.length,
                               fetch: plan.fetch(inBlock: span.index, size: size), whole: plan.wholeBlocks)
            }
            if let last = spans.last {
                if sequential || plan.wholeBlocks {
                    readAhead(node, committed, size: size, after: last.index, fetchNotHeld: plan.wholeBlocks)
                }
                // The window reaches into the next block: its online-only chunks come with the read.
                if !plan.wholeBlocks && plan.lastBlock > last.index {
                    for index in stride(from: last.index + 1, through: plan.lastBlock, by: 1) {
                        guard let digest = committed[index], node.notHeld.contains(digest) else { continue }
                        ahead.append((digest, Blocks.length(ofBlock: index, fileSize: size), plan.fetch(inBlock: index, size: size)))
                    }
                }
            }
            node.sequentialEnd = offset + Int64(count)
            return planned
        }
        if case .copied(let n) = planned.first { return .bytes(n) }
        // Blocks not held here are fetched outside the node's lock: other readers of the
        // file are not held up by the network.
        let pieces: [ReadPiece] = try planned.map { piece in
            switch piece {
            case .ready(let p): return p
            case .copied: throw Errno.ioError   // only ever alone, handled above
            case .remote(let digest, let blockLength, let inBlock, let length, let fetch, let whole):
                return try fetchedPiece(digest, blockLength: blockLength, range: inBlock..<(inBlock + length), fetch: fetch, whole: whole)
            }
        }
        for (digest, length, range) in ahead {
            _ = try blockCache.descriptor(digest, length: length, range: range, interactive: true, whole: false)
        }
        return .pieces(pieces)
    }

    /// The piece of `range` of a block not held here (or just fetched): from memory when
    /// a whole fetch for a sequential reader kept it there, else from the block cache's
    /// descriptor, which fetches what is missing of `fetch` (the range and the reader's
    /// window in this block; `whole`: the whole block), verified.
    func fetchedPiece(_ digest: SHA256Digest, blockLength: Int, range: Range<Int>, fetch: Range<Int>, whole: Bool) throws -> ReadPiece {
        // Also a reader not seen as sequential (the kernel's readahead sends a block's
        // pieces on several threads at once) takes the bytes a whole fetch kept.
        if let m = blockCache.awaitFetched(digest, range) { return .memory(m, offset: range.lowerBound, length: range.count) }
        let wanted = min(range.lowerBound, fetch.isEmpty ? range.lowerBound : fetch.lowerBound)..<max(range.upperBound, fetch.upperBound)
        let fd = try blockCache.descriptor(digest, length: blockLength, range: wanted, interactive: true,
                                           whole: whole, keepInMemory: whole)
        if let m = blockCache.fetched.take(digest, range) { return .memory(m, offset: range.lowerBound, length: range.count) }
        return .block(fd, offset: Int64(range.lowerBound), length: range.count)
    }

    /// A read's piece before blocks not held here are fetched.
    private enum PlannedPiece {
        case ready(ReadPiece)
        case copied(Int)
        case remote(SHA256Digest, blockLength: Int, inBlock: Int, length: Int, fetch: Range<Int>, whole: Bool)
    }

    /// The open file's cached descriptor of a stored block, when the block is here.
    /// `inlineChecked`: the block is known not to be packed.
    private func residentReader(_ node: OpenNode, _ digest: SHA256Digest, inlineChecked: Bool = false) throws -> SharedDescriptor? {
        if let d = node.readers[digest] { return d }
        guard let fd = try inlineChecked ? blockCache.openHeldFile(digest) : openIfResident(digest) else { return nil }
        return try node.reader(digest) { _ in fd }
    }

    /// The open file's copy of a small block kept in the pack, when it is one.
    private func inlineReader(_ node: OpenNode, _ digest: SHA256Digest, length: Int) throws -> InlineBytes? {
        guard length <= InlineBlocks.limit else { return nil }
        if let b = node.inline[digest] { return b }
        guard let bytes = try catalog.packedBlock(digest) else { return nil }
        // Never a reply past its bytes: a row shorter than the file says is read as a block
        // not held here (fetched again, checked against its hash).
        guard bytes.count == length else {
            DriveLog.error("block \(digest.hex) in the pack has \(bytes.count) bytes, not \(length): reads of its file fetch it again")
            return nil
        }
        let b = InlineBytes(bytes)
        if node.inline.count >= 8 { node.inline.removeAll(keepingCapacity: true) }
        node.inline[digest] = b
        return b
    }

    /// Ahead of a sequential reader: the next stored block is asked of the disk (every
    /// block is a file of its own, so the kernel's readahead, which follows one file,
    /// would start again small at each block boundary: measured, a cold sequential read
    /// of 1 GiB at 0.6-0.8x passthrough_hp without this); with `fetchNotHeld` (the
    /// reader's window is at whole blocks) the next blocks not held here are fetched in
    /// the background. Called with `node.lock` held.
    private func readAhead(_ node: OpenNode, _ committed: [Int: SHA256Digest], size: Int64, after index: Int, fetchNotHeld: Bool) {
        for ahead in 1...BlockCache.prefetchDepth {
            guard let next = committed[index + ahead] else { continue }
            let notHeld = node.notHeld.contains(next)
            if !fetchNotHeld && (notHeld || ahead > 1) { continue }
            // Only the next block's descriptor is opened (and kept with the file's
            // readers); `prefetch` returns at once for blocks further on that are here.
            if ahead == 1, !notHeld, let fd = try? residentReader(node, next) {
                if node.prefetched != next {
                    Self.adviseWillNeed(fd.fd)
                    node.prefetched = next
                }
                continue
            }
            blockCache.prefetch(next, length: Blocks.length(ofBlock: index + ahead, fileSize: size),
                                knownNotHeld: notHeld)
        }
    }

    /// Starts reading a whole block into the page cache in the background.
    private static func adviseWillNeed(_ fd: Int32) {
        _ = posix_fadvise(fd, 0, 0, 3)   // POSIX_FADV_WILLNEED
    }

    /// Copies a read of a file being written: dirty blocks, stored blocks, zeros.
    private func readDraft(_ node: OpenNode, _ d: Draft, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        var filled = 0
        for span in Self.blockSpans(offset: offset, count: buffer.count, size: d.size) {
            let target = UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + span.length)])
            if let b = d.dirty[span.index] {
                do { try b.read(into: target, at: span.inBlock) } catch let e as Errno where e == .ioError {
                    DriveLog.error("a block being written is shorter than its file says: the read fails with EIO")
                    throw e
                }
            } else if let digest = d.stored[span.index] {
                try readFully(node.reader(digest, open: openBlock).fd, into: target, at: Int64(span.inBlock))
            } else {
                target.initializeMemory(as: UInt8.self, repeating: 0)
            }
            filled += span.length
        }
        return filled
    }

    /// `FileIO.pread` is short only at end of file: a block shorter than its row says.
    /// Never serve zeros in its place.
    private func readFully(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        if try FileIO.pread(fd, into: buffer, at: offset) < buffer.count {
            DriveLog.error("a stored block is shorter than recorded (damaged store?): the read fails with EIO")
            throw Errno.ioError
        }
    }

    public func read(_ fh: UInt64, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        switch try readSource(fh, count: buffer.count, at: offset, buffer: { buffer }) {
        case .bytes(let n): return n
        case .pieces(let pieces):
            // Stored blocks are immutable: read them without holding the node's lock.
            var filled = 0
            for piece in pieces {
                switch piece {
                case .zeros(let n):
                    UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + n)]).initializeMemory(as: UInt8.self, repeating: 0)
                    filled += n
                case .block(let d, let offset, let length):
                    try readFully(d.fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + length)]), at: offset)
                    filled += length
                case .memory(let m, let offset, let length):
                    UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<(filled + length)]).copyMemory(from: m.bytes(offset..<(offset + length)))
                    filled += length
                }
            }
            return filled
        }
    }

    public func write(_ fh: UInt64, _ buffer: UnsafeRawBufferPointer, at offset: Int64) throws -> Int {
        let (count, hashing) = try writeHashingLater(fh, buffer, at: offset)
        for h in hashing { h.run() }
        return count
    }

    /// A write whose large in-order pieces are hashed by the caller after it answered
    /// the writer (`PendingHash.run`, each exactly once, while `buffer` is valid): the
    /// writer's next request then overlaps this one's SHA-256. A commit waits for them.
    func writeHashingLater(_ fh: UInt64, _ buffer: UnsafeRawBufferPointer, at offset: Int64, callerUid: UInt32 = 0) throws -> (Int, [PendingHash]) {
        let h = try handle(fh)
        guard h.writable else { throw Errno.badFileDescriptor }
        if offset < 0 || offset + Int64(buffer.count) > (Int64(1) << 40) { throw Errno.fileTooLarge }
        var hashing: [PendingHash] = []
        try h.node.lock.withLock {
            let d = try draftForWrite(h.node)
            if let failure = d.failure { throw failure }
            do {
                try dropPrivilegesForChange(d, ino: h.node.ino, callerUid: callerUid)
                let end = offset + Int64(buffer.count)
                if end > d.size { try resize(d, to: end, writeStart: offset) }
                var done = 0
                for span in Self.blockSpans(offset: offset, count: buffer.count, size: d.size) {
                    let length = Blocks.length(ofBlock: span.index, fileSize: d.size)
                    let b = try dirtyBlock(d, span.index, length: length, overwritten: span.inBlock == 0 && span.length >= length)
                    let piece = UnsafeRawBufferPointer(rebasing: buffer[done..<(done + span.length)])
                    if let pending = try b.write(piece, at: span.inBlock) { hashing.append(pending) }
                    done += span.length
                }
            } catch {
                for p in hashing { p.run() }   // every ticket taken must be used, or the commit waits forever
                if let failure = error as? Errno {
                    // Poisoned: the next flush must report this, even if nothing was written before.
                    d.failure = failure
                    d.changed = true
                }
                throw error
            }
            d.changed = true
            d.mtime = nowNanoseconds()
        }
        return (buffer.count, hashing)
    }

    /// Commits a node's draft, if it changed: each rewritten block hashed (while written,
    /// or by one read of that block) and linked into the store, then one catalog
    /// transaction for the new block list. On failure the previous content stays and
    /// the draft is kept, so a later flush can try again.
    func commit(_ node: OpenNode) throws {
        try node.lock.withLock {
            guard let d = node.draft, d.changed else { return }
            if let failure = d.failure {
                keepAttributes(of: d, node.ino)
                d.discard()
                node.draft = nil
                node.dropCaches()
                kernelCacheIsStale?(node.ino)
                throw failure
            }
            let writers = tables.withLock { node.writers }
            var change = ContentCommit(size: d.size, mtime: d.mtime, settled: writers == 0, attributes: d.attributes)
            var inOrder = 0, reread = 0
            for (index, b) in d.dirty {
                let length = Blocks.length(ofBlock: index, fileSize: d.size)
                let (digest, hashedWhileWriting) = try b.digest(length: length)
                if hashedWhileWriting { inOrder += 1 } else { reread += 1 }
                if Blocks.isZero(digest, length: length) {
                    change.changed.updateValue(nil, forKey: index)   // all zeros: a hole, nothing stored
                } else if b.inMemory || (index == 0 && d.size <= Int64(InlineBlocks.limit)) {
                    // A small file's block, also one staged on the disk (a large file cut
                    // down to this size): kept in the pack; the staging file is reused.
                    change.changed.updateValue(digest, forKey: index)
                    change.inlined.append((digest, try b.bytes(length: length)))
                } else {
                    change.changed.updateValue(digest, forKey: index)
                    change.staged.append((digest, b.path, length))
                }
            }
            for index in d.cleared where d.dirty[index] == nil { change.changed.updateValue(nil, forKey: index) }
            tables.withLock {
                stats.blocksHashedWhileWriting += inOrder
                stats.blocksHashedByReading += reread
            }
            _ = try catalog.commit(ino: node.ino, change)
            blockCache.clearDamaged(change.staged.map(\.digest) + change.inlined.map(\.digest))
            // The staging files are now hard links of stored blocks: never write to them again.
            d.discard()
            node.draft = nil
            node.dropCaches()
        }
    }

    /// close(2) waits for this: the file's content is committed before close returns.
    public func flush(_ fh: UInt64) throws {
        if tables.withLock({ virtualHandles[fh] != nil }) { return }
        let h = try handle(fh)
        if h.writable { try commit(h.node) }
    }

    public func fsync(_ fh: UInt64) throws {
        if tables.withLock({ virtualHandles[fh] != nil }) { return }
        let h = try handle(fh)
        try commit(h.node)
        try durability.flushNow()
    }

    public func release(_ fh: UInt64) {
        if tables.withLock({ virtualHandles.removeValue(forKey: fh) }) != nil { return }
        guard let h = tables.withLock({ handles.removeValue(forKey: fh) }) else { return }
        // Writes through a shared mapping can arrive after flush: commit them now.
        do { try commit(h.node) } catch { DriveLog.error("commit at release of inode \(h.node.ino) failed: \(error)") }
        if h.writable {
            let lastWriter: Bool = tables.withLock {
                h.node.writers -= 1
                return h.node.writers == 0
            }
            // No writable handle left: the versions committed while it was open settle.
            if lastWriter {
                do { try catalog.settle(h.node.ino) } catch { DriveLog.error("settling inode \(h.node.ino) for its followers failed: \(error)") }
            }
        }
        closeNode(h.node)
    }

    private func closeNode(_ node: OpenNode) {
        let last: Bool = tables.withLock {
            node.handles -= 1
            if node.handles == 0 { openNodes[node.ino] = nil; return true }
            return false
        }
        if last {
            node.lock.withLock {
                if let d = node.draft { keepAttributes(of: d, node.ino) }
                node.draft?.discard()
                node.draft = nil
                node.dropCaches()
            }
            releaseIfUnused(node.ino)
        }
    }

    /// Makes everything committed so far durable (FUSE fsyncdir, syncfs).
    public func syncAll() throws { try durability.flushNow() }

    // MARK: Extended attributes

    static func checkXattrName(_ name: String) throws {
        if name.utf8.count > 255 || name.isEmpty { throw Errno.outOfRange }
        // POSIX ACLs would need enforcing; refuse them so cp -a and rsync -A skip them.
        if name.hasPrefix("system.") { throw Errno.notSupported }
    }

    /// Generated attributes of a real file (`user.vdrive.*`), empty without a provider.
    private func generatedAttributes(_ ino: UInt64) -> [String: [UInt8]] {
        guard !virtualTrees.isEmpty, !VirtualInodes.contains(ino),
              let a = try? catalog.attributes(ino), a.isRegularFile,
              let path = try? catalog.path(of: ino) else { return [:] }
        return virtualTrees.reduce(into: [:]) { out, tree in out.merge(tree.attributes(ofFileAt: path, ino: ino)) { a, _ in a } }
    }

    private func isGenerated(_ name: String) -> Bool {
        virtualTrees.contains { name.hasPrefix($0.attributePrefix) } && name != CacheBound.pinAttribute   // the pin is the user's
    }

    public func setxattr(_ ino: UInt64, name: String, value: [UInt8], create: Bool, replace: Bool) throws {
        try Self.checkXattrName(name)
        try refuseVirtual(ino)
        // Generated attributes cannot be changed; the write is accepted and ignored, so copy
        // tools that preserve xattrs (cp -a, rsync -X) work from the drive to the drive.
        if isGenerated(name) { return }
        if value.count > 65536 { throw Errno.outOfRange }
        try catalog.setXattr(ino, name: name, value: value, create: create, replace: replace)
        durability.noteMetadataChanged()
        if name == CacheBound.pinAttribute { pinsChanged?() }
    }

    /// Attributes of a file of a virtual tree that the server holds (`Backups/`): the
    /// same names a backed-up Camera Roll file shows, so a script reads both alike.
    private func virtualAttributes(_ ino: UInt64) -> [String: [UInt8]] {
        guard let v = virtualPath(of: ino), case .remote(let file)? = v.tree.node(at: v.path) else { return [:] }
        return [Self.contentHashAttribute: Array(file.content.hex.utf8), Self.backupAttribute: Array("done".utf8)]
    }

    public static let contentHashAttribute = "user.vdrive.content-hash"

    /// Where the file stands with the workspace's mirror (synced, pending, online-only, …).
    public static let syncAttribute = "user.vdrive.sync"
    /// Why a file whose `syncAttribute` is `failed` could not be sent.
    public static let syncErrorAttribute = "user.vdrive.sync-error"
    public static let backupAttribute = "user.vdrive.backup"

    public func getxattr(_ ino: UInt64, name: String) throws -> [UInt8] {
        try Self.checkXattrName(name)
        if VirtualInodes.contains(ino) {
            guard let value = virtualAttributes(ino)[name] else { throw Errno.noData }
            return value
        }
        if isGenerated(name) {
            guard let value = generatedAttributes(ino)[name] else { throw Errno.noData }
            return value
        }
        return try catalog.getXattr(ino, name: name)
    }

    public func listxattr(_ ino: UInt64) throws -> [String] {
        if VirtualInodes.contains(ino) { return virtualAttributes(ino).keys.sorted() }
        return try catalog.listXattrs(ino) + generatedAttributes(ino).keys.sorted()
    }

    public func removexattr(_ ino: UInt64, name: String) throws {
        try Self.checkXattrName(name)
        try refuseVirtual(ino)
        // rsync -X removes destination attributes the source lacks: accept and ignore.
        if isGenerated(name) { return }
        try catalog.removeXattr(ino, name: name)
        durability.noteMetadataChanged()
        if name == CacheBound.pinAttribute { pinsChanged?() }
    }

    // MARK: File system

    /// statfs: the space of the disk that holds the state, the inode count from the catalog.
    public func statfs() throws -> statvfs {
        var st = statvfs()
        if statvfsPath(statePath, &st) != 0 { throw Errno.current }
        st.f_namemax = UInt(Catalog.maxNameLength)
        return st
    }

    /// The workspace path of an inode, for tools and logs.
    public func path(of ino: UInt64) throws -> String? { try catalog.path(of: ino) }
}

/// A directory entry with its attributes (readdir and readdirplus).
public struct DirectoryEntryInfo {
    public let offset: Int64
    public let name: [UInt8]
    public let attributes: NodeAttributes
}

/// `statvfs(3)` at file scope: inside the class the name would resolve to the method.
private func statvfsPath(_ path: String, _ st: inout statvfs) -> Int32 { statvfs(path, &st) }
