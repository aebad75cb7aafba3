import Foundation
import Crypto
import Storage

/// Where a small block's bytes are in the pack (PackFile.swift).
struct PackRange: Sendable, Equatable {
    let offset: Int64
    let length: Int
}

/// A small block fetched and verified, its bytes appended to the pack at `range`, not yet
/// named by its row.
struct PackedArrival: Sendable {
    let digest: SHA256Digest
    let range: PackRange
}

extension PackFile {
    /// The drive's pack of small blocks: `small-blocks.pack` beside the catalog at `catalogPath`.
    public static func path(besideCatalog catalogPath: String) -> String {
        (catalogPath as NSString).deletingLastPathComponent + "/small-blocks.pack"
    }

    /// Frees a block's range; a failure only costs space, and is logged.
    func free(at offset: Int64, length: Int) {
        do { try release(at: offset, length: length) } catch {
            DriveLog.error("freeing \(length) bytes at \(offset) of \(path) failed: \(error); the space stays used")
        }
    }
}

extension Catalog {
    /// The bytes of a small block kept in the pack, read through any connection to the
    /// catalog (`StoredBlocks` has its own); nil for a block that is not packed.
    static func packedBlock(_ digest: SHA256Digest, in db: Database, pack: PackFile) throws -> [UInt8]? {
        guard let range = try packedRange(digest, in: db) else { return nil }
        return try pack.read(at: range.offset, length: range.length)
    }

    /// Whether the catalog has table `name`: `inline_blocks` in one made before drive-008 and
    /// not opened for writing since, `packed_blocks` in one of drive-008.
    static func hasTable(_ name: String, in db: Database) throws -> Bool {
        try db.queryOne("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", name) { _ in true } ?? false
    }

    /// Where a sound block's bytes are in the pack: nil when it is not packed, or marked
    /// damaged (its reads then go to its file or the server, never to these bytes).
    static func packedRange(_ digest: SHA256Digest, in db: Database) throws -> PackRange? {
        try db.queryOne("SELECT pack_offset, size FROM blocks WHERE hash = ? AND pack_offset IS NOT NULL AND damaged = 0", digest.hex) {
            PackRange(offset: $0.int64(0), length: $0.int(1))
        }
    }
}

/// The pack's half of the catalog's content: storing a small block, freeing its range,
/// and the pack's upkeep at open. Same rules as the rest of `Catalog.Locked`.
extension Catalog.Locked {
    /// Inside a content commit's transaction, after the block's row was written: makes
    /// sure the pack holds `bytes` under `digest` and the row says where. Bytes already
    /// packed for a sound block are not written again; a damaged block's bytes are written
    /// anew (self-heal) and its old range freed after the commit.
    func storePacked(_ digest: SHA256Digest, _ bytes: UnsafeRawBufferPointer, damaged: Bool) throws {
        let old = try packedRangeSoundOrNot(digest)
        if old != nil && !damaged { return }
        try place(digest, at: PackRange(offset: try appendInChange(bytes), length: bytes.count), replacing: old)
    }

    /// The same for bytes appended already, at `range`, recorded as this change's
    /// (`recordAppendedInChange`): the range is named by the row, or freed when the
    /// pack holds the block sound already.
    func storePacked(_ digest: SHA256Digest, appendedAt range: PackRange, damaged: Bool) throws {
        let old = try packedRangeSoundOrNot(digest)
        if old != nil && !damaged {
            releasePackRanges([range])
            return
        }
        try place(digest, at: range, replacing: old)
    }

    /// Points the block's row at `range`; the range it named before is freed with the change.
    private func place(_ digest: SHA256Digest, at range: PackRange, replacing old: PackRange?) throws {
        guard try db.run("UPDATE blocks SET pack_offset = ? WHERE hash = ? AND size = ?", range.offset, digest.hex, range.length) == 1 else {
            // Every caller writes the row first: a row missing, or of another size, is a damaged catalog.
            DriveLog.error("block \(digest.hex) of \(range.length) bytes has no row of that size to say where it is in the pack: the change fails with EIO")
            throw Errno.ioError
        }
        if let old { releasePackRanges([old]) }
    }

    /// A small block this catalog has no row of (a new small file's: a commit's common
    /// case) appended to the pack, its row written with its place: two statements where
    /// `storePacked` after the row's upsert takes five. False, and nothing done, when the
    /// block has a row: the caller takes the general way (a damaged or online-only copy,
    /// one stored as a file).
    func storeNewPacked(_ digest: SHA256Digest, _ bytes: [UInt8]) throws -> Bool {
        guard try db.queryOne("SELECT 1 FROM blocks WHERE hash = ?", digest.hex, row: { _ in true }) == nil else { return false }
        let offset = try bytes.withUnsafeBytes { try appendInChange($0) }
        try db.run("INSERT INTO blocks(hash, size, refs, gen, pack_offset) VALUES (?, ?, 0, ?, ?)", digest.hex, bytes.count, generation, offset)
        return true
    }

    /// Appends a block's bytes to the pack for the open change; returns where they are.
    private func appendInChange(_ bytes: UnsafeRawBufferPointer) throws -> Int64 {
        let offset = try pack.append(bytes)
        recordAppendedInChange(PackRange(offset: offset, length: bytes.count))
        return offset
    }

    /// Makes bytes appended to the pack the open change's: punched if it is rolled back
    /// (`packChangeRolledBack`), or its group lost.
    func recordAppendedInChange(_ range: PackRange) {
        packAppendedInChange.append(range)
    }

    /// A block marked damaged stored again as a file (a commit, a fetch): its packed copy,
    /// the wrong bytes, goes with the mark, so that no read prefers it to the new file.
    func dropDamagedPackedCopy(_ digest: SHA256Digest) throws {
        guard try isMarkedDamaged(digest), let old = try packedRangeSoundOrNot(digest) else { return }
        try db.run("UPDATE blocks SET pack_offset = NULL WHERE hash = ?", digest.hex)
        releasePackRanges([old])
    }

    /// Whether block `digest` has a row marked damaged (read before a save resets the mark).
    func isMarkedDamaged(_ digest: SHA256Digest) throws -> Bool {
        try db.queryOne("SELECT damaged FROM blocks WHERE hash = ?", digest.hex) { $0.int(0) != 0 } ?? false
    }

    /// The block's packed range, whether or not the block is marked damaged.
    private func packedRangeSoundOrNot(_ digest: SHA256Digest) throws -> PackRange? {
        try db.queryOne("SELECT pack_offset, size FROM blocks WHERE hash = ? AND pack_offset IS NOT NULL", digest.hex) {
            PackRange(offset: $0.int64(0), length: $0.int(1))
        }
    }

    /// The packed ranges of blocks about to be dropped by `condition` on `blocks`.
    func packedRanges(ofBlocksWhere condition: String) throws -> [PackRange] {
        try db.query("SELECT pack_offset, size FROM blocks WHERE pack_offset IS NOT NULL AND (\(condition))") {
            PackRange(offset: $0.int64(0), length: $0.int(1))
        }
    }

    /// Ranges whose rows the transaction being made dropped: freed once that is committed,
    /// never before (a rollback, or a lost group, brings the rows back).
    ///
    /// Why the bookkeeping lives at the transaction's ends and not with each caller: a
    /// change is a transaction of its own or a savepoint of the open group, and the callers
    /// that drop blocks are many (a commit, an unlink, the garbage pass, a remote change).
    /// The connection tells the end of every transaction that succeeded (`changeEnded`) and
    /// every rollback, of a savepoint or of the whole transaction (`rolledBack`).
    func releasePackRanges(_ ranges: [PackRange]) {
        packFreedInChange += ranges
    }

    /// A transaction ended well: committed on its own (what it dropped is freed now), or
    /// released into the open group (both lists wait for the group's outcome).
    func packChangeEnded() {
        if packAppendedInChange.isEmpty && packFreedInChange.isEmpty { return }
        if db.groupStarted != nil {
            packRangesInGroup += packAppendedInChange
            packRangesAfterCommit += packFreedInChange
        } else {
            for r in packFreedInChange { pack.free(at: r.offset, length: r.length) }
        }
        packAppendedInChange = []
        packFreedInChange = []
    }

    /// A transaction was rolled back: its appended bytes are named by no row (freed), and
    /// what it dropped is named again (kept).
    func packChangeRolledBack() {
        for r in packAppendedInChange { pack.free(at: r.offset, length: r.length) }
        packAppendedInChange = []
        packFreedInChange = []
    }

    /// The open group committed: its dropped ranges are freed, its appended ones stay.
    func packGroupCommitted() {
        let ranges = packRangesAfterCommit
        packRangesAfterCommit = []
        packRangesInGroup = []
        for r in ranges { pack.free(at: r.offset, length: r.length) }
    }

    /// The open group was lost: what it appended is named by no row; what it dropped is
    /// named again.
    func packGroupLost() {
        for r in packRangesInGroup { pack.free(at: r.offset, length: r.length) }
        packRangesInGroup = []
        packRangesAfterCommit = []
    }

    /// At open: cuts what follows the last block a row names (appended for changes a
    /// kill took back).
    func cutPackTail() throws {
        let end = try db.queryOne("SELECT coalesce(max(pack_offset + size), 0) FROM blocks WHERE pack_offset IS NOT NULL") { $0.int64(0) } ?? 0
        try pack.cutTail(keeping: end)
    }

    /// A catalog that kept small blocks' bytes in `inline_blocks` (before drive-008): the
    /// bytes go to the pack, a batch at a time, each batch's rows moved in one transaction
    /// after the pack was synced; then the table goes. A kill in between leaves a batch's
    /// bytes in the pack that no row names (cut at the next open) and its rows still in
    /// the table (moved again).
    func moveInlineBlocksToPack() throws {
        guard try Catalog.hasTable("inline_blocks", in: db) else { return }
        try cutPackTail()
        var moved = 0
        while true {
            let rows = try db.query("SELECT rowid, hash, data FROM inline_blocks ORDER BY rowid LIMIT 1000") {
                ($0.int64(0), $0.string(1) ?? "", $0.bytes(2) ?? [])
            }
            if rows.isEmpty { break }
            var placed: [(String, Int64, Int)] = []
            for (_, hash, data) in rows {
                placed.append((hash, try data.withUnsafeBytes { try pack.append($0) }, data.count))
            }
            try pack.sync()
            try db.transaction {
                for (hash, offset, length) in placed {
                    try db.run("UPDATE blocks SET pack_offset = ? WHERE hash = ? AND size = ? AND pack_offset IS NULL", offset, hash, length)
                }
                try db.run("DELETE FROM inline_blocks WHERE rowid <= ?", rows.last!.0)
            }
            moved += rows.count
        }
        try db.transaction {
            try db.execute("DROP TRIGGER IF EXISTS blocks_delete_inline")
            try db.execute("DROP TABLE inline_blocks")
        }
        if moved > 0 { DriveLog.info("moved the bytes of \(moved) small blocks from the catalog into \(pack.path)") }
    }
}
