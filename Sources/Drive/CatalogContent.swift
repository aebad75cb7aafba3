import Foundation
import Crypto
import Storage

/// One content commit: what changed in a file's block list since the committed version.
struct ContentCommit {
    var size: Int64
    var mtime: Int64?
    /// Blocks rewritten: the new digest, or nil for a block that became a hole.
    var changed: [Int: SHA256Digest?] = [:]
    /// Staging files holding new blocks, to link into the store under their digest.
    var staged: [(digest: SHA256Digest, path: String, length: Int)] = []
    /// New blocks of small files, kept in the pack (InlineBlocks.swift).
    var inlined: [(digest: SHA256Digest, bytes: [UInt8])] = []
    /// False while a writable handle stays open (see `ContentVersion.settled`).
    var settled = true
    /// chmod, chown, utimens made while the file was being written, committed with it.
    var attributes = AttributeChanges()
}

extension Catalog {
    /// A file's stored blocks by index (holes have none).
    func storedBlocks(_ ino: UInt64) throws -> [Int: SHA256Digest] { try withDatabase { try $0.storedBlocks(ino) } }

    /// A file's committed size, its stored blocks by index, and those of them that are
    /// online-only: what a reader needs, in one step.
    func committedContent(_ ino: UInt64) throws -> (size: Int64, blocks: [Int: SHA256Digest], notHeld: Set<SHA256Digest>) {
        try withDatabase { c in
            let size = try c.node(ino).size
            let (blocks, notHeld) = try c.storedBlocksAndNotHeld(ino)
            return (size, blocks, notHeld)
        }
    }

    func commit(ino: UInt64, _ change: ContentCommit) throws -> NodeAttributes {
        try withDatabase { try $0.commit(ino: ino, change) }
    }

    /// Without followers (checked without the lock, `hasFollowers`) a release takes no lock.
    func settle(_ ino: UInt64) throws {
        guard hasFollowers else { return }
        try withDatabase { try $0.settle(ino) }
    }

    func collectGarbage() throws { try withDatabase { try $0.collectGarbage() } }

    func meta(_ key: String) throws -> Int64? { try withDatabase { try $0.meta(key) } }

    func setMeta(_ key: String, _ value: Int64) throws { try withDatabase { try $0.setMeta(key, value) } }

    func packedBlock(_ digest: SHA256Digest) throws -> [UInt8]? { try withDatabase { try $0.packedBlock(digest) } }

    /// Whether a sound copy of the block is in the pack (no bytes read).
    func isPacked(_ digest: SHA256Digest) throws -> Bool { try withDatabase { try Catalog.packedRange(digest, in: $0.db) != nil } }

    func markDamaged(_ digest: SHA256Digest) throws { try withDatabase { try $0.markDamaged(digest) } }

    func damagedBlocks() throws -> Set<SHA256Digest> { try withDatabase { try $0.damagedBlocks() } }

    func sweepUnknownBlockFiles() throws -> Int { try withDatabase { try $0.sweepUnknownBlockFiles() } }

    func pathsUsing(_ digest: SHA256Digest) throws -> [String] { try withDatabase { try $0.pathsUsing(digest) } }

    func counts() throws -> (inodes: Int64, bytes: Int64) { try withDatabase { try $0.counts() } }

    /// For a flush: commits the open group, then returns the generation and runs `take`
    /// (which takes the blocks stored so far) under the lock, so that every block stored
    /// up to that generation is among them.
    func generationForFlush<T>(_ take: () -> T) throws -> (Int64, T) {
        try withDatabaseUnchecked {
            try $0.commitGroup()
            return ($0.generation, take())
        }
    }

    // MARK: On any connection (the caller's own, or the catalog's from a `Locked`)

    /// Every block digest of a file of `size` bytes, holes as the digest of their zeros.
    static func fullList(_ stored: [Int: SHA256Digest], size: Int64) -> [SHA256Digest] {
        (0..<Blocks.count(forSize: size)).map { i in
            stored[i] ?? Blocks.zeroDigest(length: Blocks.length(ofBlock: i, fileSize: size))
        }
    }

    /// A file's stored blocks by index, on any connection (`committedBlocks` reads its own).
    static func blockRows(of ino: UInt64, in db: Database) throws -> [Int: SHA256Digest] {
        var out: [Int: SHA256Digest] = [:]
        for (index, hex) in try db.query("SELECT idx, hash FROM file_blocks WHERE ino = ?", ino, row: { (Int($0.int64(0)), $0.string(1) ?? "") }) {
            if let d = SHA256Digest(hex: hex) { out[index] = d }
        }
        return out
    }

}

/// The content half of the catalog: block lists, commits, block lifetime, damage.
/// Same rules as the rest of `Catalog.Locked`: every method needs the lock held.
extension Catalog.Locked {
    /// A file's stored blocks by index (holes have none).
    func storedBlocks(_ ino: UInt64) throws -> [Int: SHA256Digest] { try Catalog.blockRows(of: ino, in: db) }

    /// `ino`'s blocks by index, and those of them that are online-only (not held here),
    /// in one query: what a reader needs (it skips looking for the block files of the
    /// second).
    func storedBlocksAndNotHeld(_ ino: UInt64) throws -> (blocks: [Int: SHA256Digest], notHeld: Set<SHA256Digest>) {
        var blocks: [Int: SHA256Digest] = [:]
        var notHeld = Set<SHA256Digest>()
        for (index, hex, resident) in try db.query("""
            SELECT f.idx, f.hash, coalesce(b.resident, 1) FROM file_blocks f LEFT JOIN blocks b ON b.hash = f.hash WHERE f.ino = ?
            """, Int64(ino), row: { (Int($0.int64(0)), $0.string(1) ?? "", $0.int(2)) }) {
            guard let d = SHA256Digest(hex: hex) else { continue }
            blocks[index] = d
            if resident == 0 { notHeld.insert(d) }
        }
        return (blocks, notHeld)
    }

    /// Points a file at new content in one transaction: block rows, the file's block
    /// list, its content hash, size and times, and what its followers record of it (the
    /// backup queue's rows for a photo). New block files are hard-linked into the store
    /// first, under the lock; on failure nothing changes and the files this call linked go.
    func commit(ino: UInt64, _ change: ContentCommit) throws -> NodeAttributes {
        var a = try node(ino)
        var linkedHere: [SHA256Digest] = []
        var staged = change.staged
        var inlined = change.inlined
        var written: [String] = []
        defer { for path in written { _ = unlink(path) } }
        // A photo stays a file whatever its size when its follower says so: the backup
        // and "optimize storage" work on block files (an inline block cannot be made
        // online-only). Asked before the transaction, told inside it: a path worked out
        // for the question is not looked up again for the change.
        let asked = inlined.isEmpty || journals.isEmpty ? nil : DriveChange(.content, ino, catalog: self)
        if let asked, try followersKeepBlockFiles(asked) {
            for block in inlined {
                let (fd, stagingPath) = try blobs.makeStagingFile()
                written.append(stagingPath)
                defer { FileIO.close(fd) }
                try block.bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
                staged.append((block.digest, stagingPath, block.bytes.count))
            }
            inlined = []
        }
        do {
            for s in staged where try linkIntoStore(s.path, s.digest) { linkedHere.append(s.digest) }
            let now = nowNanoseconds()
            let (attrs, garbage) = try write { () -> (NodeAttributes, [SHA256Digest]) in
                generation += 1
                for s in staged {
                    try dropDamagedPackedCopy(s.digest)
                    try db.run("""
                        INSERT INTO blocks(hash, size, refs, gen) VALUES (?, ?, 0, ?)
                        ON CONFLICT(hash) DO UPDATE SET damaged = 0, resident = 1, gen = excluded.gen WHERE blocks.damaged = 1 OR blocks.resident = 0
                        """, s.digest.hex, s.length, generation)
                }
                for block in inlined {
                    if try storeNewPacked(block.digest, block.bytes) { continue }
                    let damaged = try isMarkedDamaged(block.digest)
                    try db.run("""
                        INSERT INTO blocks(hash, size, refs, gen) VALUES (?, ?, 0, ?)
                        ON CONFLICT(hash) DO UPDATE SET damaged = 0, resident = 1 WHERE blocks.damaged = 1 OR blocks.resident = 0
                        """, block.digest.hex, block.bytes.count, generation)
                    try block.bytes.withUnsafeBytes { try storePacked(block.digest, $0, damaged: damaged) }
                }
                // A file has block rows only below its size: one that was empty (a new
                // file, the common commit) has none to clear or read back.
                let hadBlocks = a.size > 0
                if hadBlocks { try db.run("DELETE FROM file_blocks WHERE ino = ? AND idx >= ?", ino, Blocks.count(forSize: change.size)) }
                var added: [Int: SHA256Digest] = [:]
                for (index, digest) in change.changed where index < Blocks.count(forSize: change.size) {
                    if let digest {
                        try db.run("INSERT INTO file_blocks(ino, idx, hash) VALUES (?, ?, ?) ON CONFLICT(ino, idx) DO UPDATE SET hash = excluded.hash",
                                   ino, index, digest.hex)
                        added[index] = digest
                    } else if hadBlocks {
                        try db.run("DELETE FROM file_blocks WHERE ino = ? AND idx = ?", ino, index)
                    }
                }
                let rows = hadBlocks ? try Catalog.blockRows(of: ino, in: db) : added
                let blocks = Catalog.fullList(rows, size: change.size)
                let content = ContentHash.of(blocks: blocks)
                a.content = content
                a.size = change.size
                a.stored = rows.keys.reduce(0) { $0 + Int64(Blocks.length(ofBlock: $1, fileSize: change.size)) }
                change.attributes.apply(to: &a)
                a.mtime = change.mtime ?? now
                a.ctime = now
                try db.run("UPDATE inodes SET content = ?, size = ?, stored = ?, mtime_ns = ?, ctime_ns = ?, mode = ?, uid = ?, gid = ?, atime_ns = ? WHERE ino = ?",
                           content.hex, change.size, a.stored, a.mtime, a.ctime, a.mode, a.uid, a.gid, a.atime, ino)
                if !journals.isEmpty {
                    try journal(DriveChange(.content, ino, catalog: self, sharingPathWith: asked,
                                            version: ContentVersion(hash: content, blocks: blocks, size: change.size,
                                                                    mtimeNanoseconds: a.mtime, settled: change.settled)))
                }
                return (a, try takeUnreferencedBlocks())
            }
            removeBlockFiles(garbage)
            // Packed bytes wake the flusher too (it syncs the pack); they need no fsync of their own.
            if !staged.isEmpty || !inlined.isEmpty { blocksStored?(staged.map(\.digest)) }
            return attrs
        } catch {
            for d in linkedHere { blobs.remove(d) }
            throw error
        }
    }

    /// Hard-links a staging file into the store. Returns true when this call created the
    /// block file. The link is tried first: a new block (the common case) costs one
    /// system call.
    ///
    /// A file already there is kept only when a sound, resident row vouches for it. Any
    /// other file of that name is replaced by the bytes just hashed: one whose row was
    /// dropped in the open group (its removal waits for the commit), a leftover of a
    /// kill, or a block marked damaged (self-heal). Trusting such a file would let a row
    /// name bytes nobody checked, or a file about to be removed.
    private func linkIntoStore(_ stagingPath: String, _ digest: SHA256Digest) throws -> Bool {
        let target = blobs.path(for: digest)
        try blobs.makeFolder(for: digest)
        if Glibc.link(stagingPath, target) == 0 { return true }
        if errno != EEXIST { throw Errno.current }
        let vouched = try db.queryOne("SELECT 1 FROM blocks WHERE hash = ? AND damaged = 0 AND resident = 1", digest.hex) { _ in true } ?? false
        if vouched { return false }
        _ = unlink(target)
        if Glibc.link(stagingPath, target) == 0 { return true }
        if errno == EEXIST { return false }
        throw Errno.current
    }

    /// The last writable handle of a file was released: the versions a follower took
    /// unsettled settle.
    func settle(_ ino: UInt64) throws {
        // Only an inode whose unsettled version a follower took in this process can need
        // it (those of an earlier process are settled at start): every other release
        // costs no query.
        guard unsettledInodes.remove(ino) != nil else { return }
        try write {
            for follower in journals {
                if try follower.settled(ino: ino, in: db) {
                    journalAwaitsCommit = true
                    commitRequested = true
                }
            }
        }
    }

    /// Blocks no file or pin names any more. A block fetched from the server stays as
    /// cache (the cache bound evicts it, BlockCache.swift); one not held locally has no file.
    func takeUnreferencedBlocks() throws -> [SHA256Digest] {
        let unreferenced = "refs <= 0 AND (fetched = 0 OR resident = 0)"
        let hashes = try db.query("SELECT hash FROM blocks WHERE \(unreferenced)") { SHA256Digest(hex: $0.string(0) ?? "") }
        if !hashes.isEmpty {
            let packed = try packedRanges(ofBlocksWhere: unreferenced)
            try db.run("DELETE FROM blocks WHERE \(unreferenced)")
            releasePackRanges(packed)
        }
        return hashes.compactMap { $0 }
    }

    /// After the transaction that dropped the rows; while
    /// that transaction is part of an open group, the files go when the group commits.
    func removeBlockFiles(_ digests: [SHA256Digest]) {
        guard !digests.isEmpty else { return }
        if db.groupStarted != nil {
            removalsAfterCommit += digests
        } else {
            removeUnnamedBlockFiles(digests)
        }
    }

    /// Removes the files of `digests` that no row needs at this moment. Called with the
    /// lock held, so no commit, adoption or eviction runs between the check and the
    /// removal.
    ///
    /// Why at this moment and not when the row was dropped: the removal of a block whose
    /// last reference went waits for the commit of the group that dropped its row, and
    /// in between the same bytes may be saved again (a file deleted and written back, an
    /// importer deleting and re-importing a photo, `make clean && make`). That commit
    /// finds the file still there, keeps it and records the block again; removing the
    /// file then would leave a row naming nothing, read as EIO after the next mount. A
    /// packed block needs no file, so its file goes.
    func removeUnnamedBlockFiles(_ digests: [SHA256Digest]) {
        var unnamed: [SHA256Digest] = []
        for d in digests {
            do {
                let named = try db.queryOne("""
                    SELECT 1 FROM blocks WHERE hash = ? AND resident = 1 AND pack_offset IS NULL
                    """, d.hex) { _ in true } ?? false
                if !named { unnamed.append(d) }
            } catch {
                // Unknown is kept: a stray file costs space until the sweep after an
                // unclean stop; a removed one could be a file a row names.
                DriveLog.error("could not tell whether block \(d.hex) is still needed (\(error)); its file is kept")
            }
        }
        blobs.removeLater(unnamed)
    }

    /// Removes blocks whose last reference went away through another connection
    /// (the backup engine finishing an upload releases its pin).
    func collectGarbage() throws {
        let garbage = try db.transaction { try takeUnreferencedBlocks() }
        removeBlockFiles(garbage)
    }

    // MARK: Durability bookkeeping (see Durability.swift)

    func meta(_ key: String) throws -> Int64? {
        try db.queryOne("SELECT value FROM drive_meta WHERE key = ?", key) { $0.int64(0) }
    }

    func setMeta(_ key: String, _ value: Int64) throws {
        try db.run("INSERT INTO drive_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
    }

    /// The bytes of a small block kept in the pack, or nil for a block file.
    func packedBlock(_ digest: SHA256Digest) throws -> [UInt8]? {
        try Catalog.packedBlock(digest, in: db, pack: pack)
    }

    func markDamaged(_ digest: SHA256Digest) throws {
        _ = try db.run("UPDATE blocks SET damaged = 1 WHERE hash = ?", digest.hex)
    }

    func damagedBlocks() throws -> Set<SHA256Digest> {
        Set(try db.query("SELECT hash FROM blocks WHERE damaged = 1") { SHA256Digest(hex: $0.string(0) ?? "") }.compactMap { $0 })
    }

    /// Removes block files that no row names (left by a kill between link and commit).
    func sweepUnknownBlockFiles() throws -> Int {
        let known = Set(try db.query("SELECT hash FROM blocks") { $0.string(0) ?? "" })
        var removed = 0
        for d in try blobs.allDigests() where !known.contains(d.hex) {
            blobs.remove(d)
            removed += 1
        }
        return removed
    }

    /// Paths of files that use a block (reported when it is found damaged).
    func pathsUsing(_ digest: SHA256Digest) throws -> [String] {
        let inos = try db.query("SELECT DISTINCT ino FROM file_blocks WHERE hash = ?", digest.hex) { UInt64($0.int64(0)) }
        return try inos.compactMap { try path(of: $0) }
    }

    /// Totals for statfs and status: inodes, and the bytes the stored blocks hold.
    func counts() throws -> (inodes: Int64, bytes: Int64) {
        let inodes = try db.queryOne("SELECT count(*) FROM inodes") { $0.int64(0) } ?? 0
        let bytes = try db.queryOne("SELECT coalesce(sum(size), 0) FROM blocks WHERE resident = 1") { $0.int64(0) } ?? 0
        return (inodes, bytes)
    }
}
