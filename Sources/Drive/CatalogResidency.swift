import Foundation
import Crypto
import Storage

extension Catalog {
    func blockLength(_ digest: SHA256Digest) throws -> Int? { try withDatabase { try $0.blockLength(digest) } }

    func chunkDigests(_ digest: SHA256Digest) throws -> [SHA256Digest]? { try withDatabase { try $0.chunkDigests(digest) } }

    func saveChunkDigests(_ digest: SHA256Digest, _ chunks: [SHA256Digest]) throws {
        try withDatabase { try $0.saveChunkDigests(digest, chunks) }
    }

    func verifiedChunks(_ digest: SHA256Digest) throws -> UInt64 { try withDatabase { try $0.verifiedChunks(digest) } }

    func recordVerifiedChunks(_ digest: SHA256Digest, length: Int, mask: UInt64) throws {
        try withDatabase { try $0.recordVerifiedChunks(digest, length: length, mask: mask) }
    }

    func forgetPartial(_ digest: SHA256Digest, chunkDigestsToo: Bool) throws {
        try withDatabase { try $0.forgetPartial(digest, chunkDigestsToo: chunkDigestsToo) }
    }

    func forgetAllPartials() throws -> [SHA256Digest] { try withDatabase { try $0.forgetAllPartials() } }

    func adoptFetchedBlock(from path: String, _ digest: SHA256Digest, length: Int) throws -> Int64 {
        try withDatabase { try $0.adoptFetchedBlock(from: path, digest, length: length) }
    }

    /// Small blocks fetched whole and verified whose bytes the caller already appended to
    /// the pack (`pack.append`, outside the lock: a reader waits for the lock, not for
    /// the copy), recorded as held in one step under the lock. Every range is the
    /// catalog's from here: named by its row, or freed (punched) once the change ends,
    /// and on any failure.
    func adoptFetchedPacked(_ arrivals: [PackedArrival]) throws {
        guard !arrivals.isEmpty else { return }
        var taken = false
        do {
            try withDatabase { db in
                try db.adoptFetchedPacked(arrivals) { taken = true }
            }
        } catch {
            if !taken { for a in arrivals { pack.free(at: a.range.offset, length: a.range.length) } }
            throw error
        }
    }

    /// Of `digests`, those held here and sound (packed, or a block file), and those
    /// some of whose chunks are here (a partial block): one lock for a batch of blocks.
    func holdings(_ digests: [SHA256Digest]) throws -> (held: Set<SHA256Digest>, partial: Set<SHA256Digest>) {
        try withDatabase { try $0.holdings(digests) }
    }

    func holdsAll(_ digests: Set<SHA256Digest>) throws -> Bool { try withDatabase { try $0.holdsAll(digests) } }

    /// An empty batch takes no lock.
    func recordUse(_ uses: [SHA256Digest: Int64]) throws {
        guard !uses.isEmpty else { return }
        try withDatabase { try $0.recordUse(uses) }
    }

    /// Bytes of the store by kind: blocks a local file names (`local`), blocks fetched
    /// from the server that no file names and partial blocks (`cached`), and blocks files
    /// name that have no file here (`onlineOnly`).
    func residencyTotals() throws -> (local: Int64, cached: Int64, onlineOnly: Int64) {
        try withDatabase { try Catalog.residencyTotals($0.db) }
    }

    func partialBytes() throws -> Int64 { try withDatabase { try Catalog.partialBytes($0.db) } }

    typealias EvictionCandidate = (digest: SHA256Digest, size: Int64)
    typealias ResidentFile = (ino: UInt64, path: String, content: SHA256Digest, pinned: Bool)

    func evictionCandidates(originals: Set<UInt64>?) throws -> [EvictionCandidate] {
        try withDatabase { try $0.evictionCandidates(originals: originals) }
    }

    @discardableResult
    func evict(_ digest: SHA256Digest, onlyNamedBy originals: Set<UInt64>? = nil) throws -> Bool {
        try withDatabase { try $0.evict(digest, onlyNamedBy: originals) }
    }

    func residentFiles(pinXattr: String) throws -> [ResidentFile] { try withDatabase { try $0.residentFiles(pinXattr: pinXattr) } }

    func pinnedBlocksNotHeld(pinXattr: String, limit: Int) throws -> [(digest: SHA256Digest, length: Int)] {
        try withDatabase { try $0.pinnedBlocksNotHeld(pinXattr: pinXattr, limit: limit) }
    }

    /// Runs `body` on the catalog's connection under the lock (the backup ledger's queries).
    func reading<T>(_ body: (Database) throws -> T) throws -> T { try withDatabase { try body($0.db) } }

    func writingForLedger(_ body: (Database) throws -> Void) throws { try withDatabase { try $0.writingForLedger(body) } }

    // MARK: On any connection (the caller's own, or the catalog's from a `Locked`)

    static func residencyTotals(_ db: Database) throws -> (local: Int64, cached: Int64, onlineOnly: Int64) {
        let partial = try Catalog.partialBytes(db)
        let t = try db.queryOne("""
                SELECT coalesce(sum(CASE WHEN resident = 1 AND refs > 0 THEN size END), 0),
                       coalesce(sum(CASE WHEN resident = 1 AND refs <= 0 THEN size END), 0),
                       coalesce(sum(CASE WHEN resident = 0 AND refs > 0 THEN size END), 0)
                FROM blocks
                """) { ($0.int64(0), $0.int64(1), $0.int64(2)) } ?? (0, 0, 0)
        return (t.0, t.1 + partial, t.2)
    }

    /// Bytes of verified chunks in partial files (the last chunk of a block may be
    /// shorter: counted whole, at most 256 KiB off per block).
    static func partialBytes(_ db: Database) throws -> Int64 {
        try db.query("SELECT chunks FROM partial_blocks") { Int64(UInt64(bitPattern: $0.int64(0)).nonzeroBitCount) }
            .reduce(0, +) * Int64(Blocks.chunkSize)
    }

    /// The recursive view `pinned(ino)`: inodes carrying the pin attribute (bound as the
    /// query's first parameter) and everything below a pinned folder, so a file made in
    /// (or brought into) a pinned folder later is pinned too.
    static let pinnedInodes = """
        pinned(ino) AS (SELECT ino FROM xattrs WHERE name = ?1
                        UNION SELECT e.ino FROM entries e JOIN pinned p ON e.parent = p.ino)
        """
}

/// The residency half of the catalog (drive-004): which blocks have a file here, which
/// came from the server, chunk digests, partial fetches, and what the cache bound may
/// evict. Same rules as the rest of `Catalog.Locked`: every method needs the lock held.
extension Catalog.Locked {
    /// The recorded length of a block, when a row names it.
    func blockLength(_ digest: SHA256Digest) throws -> Int? {
        try db.queryOne("SELECT size FROM blocks WHERE hash = ?", digest.hex) { Int($0.int64(0)) }
    }

    // MARK: Chunk digests and partial blocks

    func chunkDigests(_ digest: SHA256Digest) throws -> [SHA256Digest]? {
        try db.queryOne("SELECT digests FROM block_chunks WHERE hash = ?", digest.hex) { row -> [SHA256Digest]? in
            let raw = row.bytes(0) ?? []
            guard raw.count % 32 == 0 else { return nil }
            return stride(from: 0, to: raw.count, by: 32).map { SHA256Digest(bytes: Array(raw[$0..<($0 + 32)])) }
        } ?? nil
    }

    func saveChunkDigests(_ digest: SHA256Digest, _ chunks: [SHA256Digest]) throws {
        _ = try db.run("INSERT INTO block_chunks(hash, digests) VALUES (?, ?) ON CONFLICT(hash) DO UPDATE SET digests = excluded.digests",
                   digest.hex, chunks.flatMap(\.bytes))
    }

    /// Which chunks of a partial block are verified in its partial file (bit i = chunk i).
    func verifiedChunks(_ digest: SHA256Digest) throws -> UInt64 {
        try db.queryOne("SELECT chunks FROM partial_blocks WHERE hash = ?", digest.hex) { UInt64(bitPattern: $0.int64(0)) } ?? 0
    }

    /// Records the chunks whose bits are set in `mask` as verified. Called only after their
    /// bytes were written to the partial file, so a kill between the two leaves them
    /// unrecorded (fetched again).
    func recordVerifiedChunks(_ digest: SHA256Digest, length: Int, mask: UInt64) throws {
        _ = try db.run("""
            INSERT INTO partial_blocks(hash, length, chunks) VALUES (?, ?, ?)
            ON CONFLICT(hash) DO UPDATE SET chunks = chunks | excluded.chunks
            """, digest.hex, length, Int64(bitPattern: mask))
    }

    func forgetPartial(_ digest: SHA256Digest, chunkDigestsToo: Bool) throws {
        try db.run("DELETE FROM partial_blocks WHERE hash = ?", digest.hex)
        if chunkDigestsToo { try db.run("DELETE FROM block_chunks WHERE hash = ?", digest.hex) }
    }

    /// After an unclean stop the kernel may have written a record before its chunk's
    /// bytes: every partial block is forgotten (they are cache: fetched again on need).
    func forgetAllPartials() throws -> [SHA256Digest] {
        let all = try db.query("SELECT hash FROM partial_blocks") { SHA256Digest(hex: $0.string(0) ?? "") }.compactMap { $0 }
        try db.run("DELETE FROM partial_blocks")
        return all
    }

    // MARK: Adoption

    /// Moves a verified block file (a partial file completed, or a whole block fetched)
    /// into the store under its digest, replacing a damaged file, and records the block
    /// as resident and fetched, in one step under the lock. Returns the generation that
    /// stored it (the flusher makes it durable like a commit's blocks).
    func adoptFetchedBlock(from path: String, _ digest: SHA256Digest, length: Int) throws -> Int64 {
        let target = blobs.path(for: digest)
        let folder = (target as NSString).deletingLastPathComponent
        if mkdir(folder, 0o700) != 0 && errno != EEXIST { throw Errno.current }
        chmod(path, 0o400)
        // rename(2) replaces a damaged file in one step; readers of it were refused.
        try FileIO.rename(path, target)
        return try write {
            generation += 1
            try dropDamagedPackedCopy(digest)
            try recordFetched(digest, length: length, now: nowNanoseconds())
            try forgetPartialOfFetched(digest)
            blocksStored?([digest])
            return generation
        }
    }

    /// Small blocks fetched whole and verified (at most `InlineBlocks.limit` bytes each),
    /// kept in the pack, not in files of their own (an inode per block was a fifth of a
    /// receiving device's CPU when 10,000 small files came), many in one transaction
    /// (`Catalog.adoptFetchedPacked(_:)`). `taken` is called once the ranges are this
    /// change's (a rollback punches them). A block with the row its file's arrival made
    /// (online-only, sound, unpacked: the common case) takes one statement; any other
    /// goes the general way, as a commit's block does.
    func adoptFetchedPacked(_ arrivals: [PackedArrival], taken: () -> Void) throws {
        try write {
            for a in arrivals { recordAppendedInChange(a.range) }
            taken()
            generation += 1
            let now = nowNanoseconds()
            for a in arrivals {
                let placed = try db.run("""
                    UPDATE blocks SET resident = 1, fetched = 1, gen = ?, used_ns = ?, pack_offset = ?
                    WHERE hash = ? AND size = ? AND resident = 0 AND damaged = 0 AND pack_offset IS NULL
                    """, generation, now, a.range.offset, a.digest.hex, a.range.length) == 1
                if !placed {
                    let damaged = try isMarkedDamaged(a.digest)
                    try recordFetched(a.digest, length: a.range.length, now: now)
                    try storePacked(a.digest, appendedAt: a.range, damaged: damaged)
                }
                try forgetPartialOfFetched(a.digest)
            }
            blocksStored?([])
        }
    }

    /// A fetched and verified block's row says it is held here, sound and cache (made
    /// when missing), stored in the open change's generation.
    private func recordFetched(_ digest: SHA256Digest, length: Int, now: Int64) throws {
        try db.run("""
            INSERT INTO blocks(hash, size, refs, gen, resident, fetched, used_ns) VALUES (?, ?, 0, ?, 1, 1, ?)
            ON CONFLICT(hash) DO UPDATE SET resident = 1, damaged = 0, fetched = 1, gen = excluded.gen, used_ns = excluded.used_ns
            """, digest.hex, length, generation, now)
    }

    /// After a fetched block was recorded: its partial record goes, and the files naming
    /// it are read again (their attributes count what is held here).
    private func forgetPartialOfFetched(_ digest: SHA256Digest) throws {
        try db.run("DELETE FROM partial_blocks WHERE hash = ?", digest.hex)
        for ino in try db.query("SELECT DISTINCT ino FROM file_blocks WHERE hash = ?", digest.hex, row: { UInt64($0.int64(0)) }) {
            attributeCache.removeValue(forKey: ino)
        }
    }

    func holdings(_ digests: [SHA256Digest]) throws -> (held: Set<SHA256Digest>, partial: Set<SHA256Digest>) {
        var held = Set<SHA256Digest>(), partial = Set<SHA256Digest>()
        for d in digests {
            let (isHeld, isPartial) = try db.queryOne("""
                SELECT (SELECT resident = 1 AND damaged = 0 FROM blocks WHERE hash = ?1),
                       (SELECT chunks <> 0 FROM partial_blocks WHERE hash = ?1)
                """, d.hex) { ($0.int(0) == 1, $0.int(1) == 1) } ?? (false, false)
            if isHeld { held.insert(d) }
            if isPartial { partial.insert(d) }
        }
        return (held, partial)
    }

    /// True when every block of `digests` is held here.
    func holdsAll(_ digests: Set<SHA256Digest>) throws -> Bool {
        for d in digests where try db.queryOne("SELECT resident FROM blocks WHERE hash = ?", d.hex, row: { $0.int(0) }) != 1 {
            return false
        }
        return true
    }

    // MARK: The cache bound

    /// Records when blocks were last read (batched by BlockCache).
    func recordUse(_ uses: [SHA256Digest: Int64]) throws {
        try db.transaction {
            for (d, ns) in uses { try db.run("UPDATE blocks SET used_ns = max(used_ns, ?) WHERE hash = ?", ns, d.hex) }
        }
    }

    /// Candidates for eviction, least recently used first: fetched blocks no file or pin
    /// names; then, when `originals` is given (optimize storage: files the server holds),
    /// blocks named only by those files (a block another file or a pending backup also
    /// names has more refs).
    func evictionCandidates(originals: Set<UInt64>?) throws -> [Catalog.EvictionCandidate] {
        var out = try db.query("SELECT hash, size FROM blocks WHERE resident = 1 AND refs <= 0 AND fetched = 1 ORDER BY used_ns") {
            (SHA256Digest(hex: $0.string(0) ?? ""), $0.int64(1))
        }
        if let originals, !originals.isEmpty {
            try db.execute("CREATE TEMP TABLE IF NOT EXISTS evictable_inodes (ino INTEGER PRIMARY KEY)")
            try db.execute("DELETE FROM evictable_inodes")
            for ino in originals { try db.run("INSERT INTO evictable_inodes(ino) VALUES (?)", ino) }
            out += try db.query("""
                SELECT b.hash, b.size FROM blocks b
                WHERE b.resident = 1 AND b.refs > 0 AND b.damaged = 0
                  AND b.refs = (SELECT count(*) FROM file_blocks f JOIN evictable_inodes e ON e.ino = f.ino WHERE f.hash = b.hash)
                ORDER BY b.used_ns
                """) { (SHA256Digest(hex: $0.string(0) ?? ""), $0.int64(1)) }
            try db.execute("DELETE FROM evictable_inodes")
        }
        return out.compactMap { c in c.0.map { ($0, c.1) } }
    }

    /// Drops a block's file: the row stays while a file names it (online-only), else goes.
    /// The row is changed first: a kill before the unlink leaves a file the read path
    /// still uses; the other order would leave a row a verification pass calls damaged.
    ///
    /// Whether the block may go is decided here, under the lock, not when it was chosen:
    /// between the two, the cache bound asks the server (seconds), and a file may have
    /// saved the same bytes. A block may go when it is cache (fetched, no file or pin
    /// names it), or when only the files of `onlyNamedBy` name it (backed-up originals,
    /// optimize storage) and nothing else counts on it: another file, a pending backup's
    /// pin, a damaged mark. A packed block's range is freed like a file. Returns whether it went.
    @discardableResult
    func evict(_ digest: SHA256Digest, onlyNamedBy originals: Set<UInt64>? = nil) throws -> Bool {
        var packed: PackRange?
        let evicted = try db.transaction { () -> Bool in
            guard let (refs, fetched, damaged) = try db.queryOne("""
                SELECT refs, fetched, damaged FROM blocks WHERE hash = ? AND resident = 1
                """, digest.hex, row: { ($0.int64(0), $0.int(1) != 0, $0.int(2) != 0) }), !damaged else { return false }
            packed = try Catalog.packedRange(digest, in: db)
            if refs <= 0 {
                guard fetched else { return false }   // the garbage pass takes it
                try db.run("DELETE FROM blocks WHERE hash = ?", digest.hex)
                try db.run("DELETE FROM block_chunks WHERE hash = ?", digest.hex)
                return true
            }
            guard let originals, !originals.isEmpty else { return false }
            let list = "[" + originals.map(String.init).joined(separator: ",") + "]"
            let byOriginals = try db.queryOne("""
                SELECT count(*) FROM file_blocks WHERE hash = ? AND ino IN (SELECT value FROM json_each(?))
                """, digest.hex, list) { $0.int64(0) } ?? 0
            guard byOriginals == refs else { return false }
            try db.run("UPDATE blocks SET resident = 0, pack_offset = NULL WHERE hash = ?", digest.hex)
            // The files naming it now take less on this disk (`heldHere`).
            for ino in try db.query("SELECT DISTINCT ino FROM file_blocks WHERE hash = ?", digest.hex, row: { UInt64($0.int64(0)) }) {
                onlineInodes?.insert(ino)
                attributeCache.removeValue(forKey: ino)
            }
            return true
        }
        guard evicted else { return false }
        // The row's change must be committed before the file or the packed range goes (group commit).
        try commitGroup()
        removeUnnamedBlockFiles([digest])
        if let packed { pack.free(at: packed.offset, length: packed.length) }
        return true
    }

    /// Regular files with stored blocks: (inode, path, content), and whether they are
    /// pinned (`pinXattr` on the file or on a folder above it). The ledger decides which
    /// of them the server holds; the drive does not know why it does.
    func residentFiles(pinXattr: String) throws -> [Catalog.ResidentFile] {
        let rows = try db.query("""
            WITH RECURSIVE \(Catalog.pinnedInodes)
            SELECT i.ino, i.content, i.ino IN (SELECT ino FROM pinned)
            FROM inodes i WHERE i.stored > 0 AND i.nlink > 0 AND i.content IS NOT NULL AND (i.mode & 61440) = 32768
            """, pinXattr) { (UInt64($0.int64(0)), SHA256Digest(hex: $0.string(1) ?? ""), $0.int(2) != 0) }
        var out: [Catalog.ResidentFile] = []
        for (ino, content, pinned) in rows {
            guard let content, let path = try path(of: ino) else { continue }
            out.append((ino, path, content, pinned))
        }
        return out
    }

    /// Blocks of pinned files that are not held here (online-only), at most `limit`,
    /// with their lengths: what keeping pinned content local still has to fetch.
    func pinnedBlocksNotHeld(pinXattr: String, limit: Int) throws -> [(digest: SHA256Digest, length: Int)] {
        try db.query("""
            WITH RECURSIVE \(Catalog.pinnedInodes)
            SELECT DISTINCT b.hash, b.size FROM file_blocks f JOIN blocks b ON b.hash = f.hash
            WHERE f.ino IN (SELECT ino FROM pinned) AND b.resident = 0 LIMIT ?2
            """, pinXattr, limit) { row -> (SHA256Digest, Int)? in
            SHA256Digest(hex: row.string(0) ?? "").map { ($0, Int(row.int64(1))) }
        }.compactMap { $0 }
    }

    /// Runs `body` in one write transaction in which the ledger queues versions to send
    /// again: committed at once, then every follower is told `committed` (the backup wakes).
    func writingForLedger(_ body: (Database) throws -> Void) throws {
        try write {
            try body(db)
            journalAwaitsCommit = true
            commitRequested = true
        }
    }
}
