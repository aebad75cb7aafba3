import Testing
import Foundation
import Crypto
import Storage
@testable import Drive

/// Small files keep their block in the pack beside the catalog (Sources/Drive/InlineBlocks.swift,
/// PackFile.swift): no block file, the same bytes back, block files again once a file
/// outgrows the limit, photos always as files, every reader of blocks (reads,
/// copy-on-write, the backup's `StoredBlocks`) served from the pack, a block's range freed
/// when it goes, and the pack's bytes checked after an unclean stop.
@Suite(.tags(.logic)) struct InlineBlockTests {
    let logic = FileSystemLogicTests()

    func contents(_ fs: DriveFileSystem, _ ino: UInt64) throws -> [UInt8] {
        let fh = try fs.open(ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        return try logic.read(fs, fh, count: Int(try fs.getattr(ino).size) + 10, at: 0)
    }

    /// Opens `ino` for writing, runs `body` with the handle, then flushes (commits) and closes.
    func changing(_ fs: DriveFileSystem, _ ino: UInt64, _ body: (UInt64) throws -> Void) throws {
        let fh = try fs.open(ino, writable: true, truncate: false)
        defer { fs.release(fh) }
        try body(fh)
        try fs.flush(fh)
    }

    /// Sets `ino`'s size through an open handle, as ftruncate does, and commits.
    func resize(_ fs: DriveFileSystem, _ ino: UInt64, to size: Int64) throws {
        try changing(fs, ino) { fh in
            _ = try fs.setattr(ino, { var c = AttributeChanges(); c.size = size; return c }(), handle: fh)
        }
    }

    func packedRows(_ dir: TemporaryDirectory) throws -> Int {
        let db = try Database(path: dir.path + "/state/catalog.sqlite", options: .init(readOnly: true, create: false))
        return try db.queryOne("SELECT count(*) FROM blocks WHERE pack_offset IS NOT NULL") { $0.int(0) } ?? -1
    }

    func packPath(_ dir: TemporaryDirectory) -> String { dir.path + "/state/small-blocks.pack" }

    /// Writes into the pack behind the drive's back (what a kill or a power cut leaves).
    func writeIntoPack(_ dir: TemporaryDirectory, _ bytes: [UInt8], at offset: Int64) throws {
        let fd = try FileIO.open(packPath(dir), O_WRONLY)
        defer { FileIO.close(fd) }
        try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: offset) }
    }

    /// Disk blocks (512 bytes) the pack holds: what a freed range gives back.
    func packDiskBlocks(_ dir: TemporaryDirectory) throws -> Int64 { Int64(try FileIO.status(packPath(dir)).st_blocks) }

    /// A catalog made when the bytes were in the catalog (`inline_blocks`, drive-007): moved
    /// into the pack at the first mount, the table gone, the same bytes read back, the block
    /// dropped with its last file, and a new small file stored beside them.
    @Test func smallBlocksOfAnOlderCatalogMoveIntoThePackAndReadBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(20_000, seed: 5)
        let a = try logic.store(fs, "old.h", bytes)
        fs.shutdown()
        do {
            // Back to the catalog as drive-007 left it: the bytes in a rowid table, no pack.
            let db = try Database(path: dir.path + "/state/catalog.sqlite")
            try db.execute("""
                CREATE TABLE inline_blocks (hash TEXT NOT NULL UNIQUE, data BLOB NOT NULL);
                CREATE TRIGGER blocks_delete_inline AFTER DELETE ON blocks BEGIN DELETE FROM inline_blocks WHERE hash = OLD.hash; END;
                ALTER TABLE blocks DROP COLUMN pack_offset;
                DELETE FROM schema_migrations WHERE name IN ('drive-008-packed-blocks', 'drive-009-pack-offset-in-blocks');
                """)
            try db.run("INSERT INTO inline_blocks(hash, data) VALUES (?, ?)", SHA256Hasher.digest(bytes).hex, bytes)
            try FileIO.unlink(packPath(dir))
        }
        let again = try logic.makeFS(dir)
        #expect(try contents(again, a.ino) == bytes)
        #expect(try packedRows(dir) == 1)
        #expect(try FileIO.status(packPath(dir)).st_size == 20_000)
        let other = pseudoRandomBytes(9_000, seed: 6)
        let b = try logic.store(again, "new.h", other)
        #expect(try contents(again, b.ino) == other)
        #expect(try packedRows(dir) == 2)
        try again.unlink(parent: 1, name: Array("old.h".utf8))
        again.collectGarbage()
        #expect(try packedRows(dir) == 1)
        #expect(try contents(again, b.ino) == other)
        again.shutdown()
        let db = try Database(path: dir.path + "/state/catalog.sqlite", options: .init(readOnly: true, create: false))
        #expect(try db.queryOne("SELECT count(*) FROM sqlite_schema WHERE name IN ('inline_blocks', 'blocks_delete_inline')") { $0.int(0) } == 0)
    }

    /// A catalog made when a table placed small blocks in the pack (`packed_blocks`,
    /// drive-008): `vdrive check` reads it as it is; the next mount moves each place into
    /// the block's row, the same bytes read back, and the pack keeps its tail.
    @Test func packedBlocksOfAnOlderCatalogKeepTheirPlaceAndReadBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let first = pseudoRandomBytes(20_000, seed: 7), second = pseudoRandomBytes(11_000, seed: 8)
        let a = try logic.store(fs, "a.h", first)
        let b = try logic.store(fs, "b.h", second)
        fs.shutdown()
        let catalogPath = dir.path + "/state/catalog.sqlite"
        do {
            // Back to the catalog as drive-008 left it: the places in a table of their own.
            let db = try Database(path: catalogPath)
            try db.execute("""
                CREATE TABLE packed_blocks (hash TEXT PRIMARY KEY, pack_offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TRIGGER blocks_delete_packed AFTER DELETE ON blocks BEGIN DELETE FROM packed_blocks WHERE hash = OLD.hash; END;
                INSERT INTO packed_blocks(hash, pack_offset, length) SELECT hash, pack_offset, size FROM blocks WHERE pack_offset IS NOT NULL;
                ALTER TABLE blocks DROP COLUMN pack_offset;
                DELETE FROM schema_migrations WHERE name = 'drive-009-pack-offset-in-blocks';
                """)
            #expect(try db.queryOne("SELECT count(*) FROM packed_blocks") { $0.int(0) } == 2)
            // The audit of `vdrive check`, on the catalog as it is: both blocks read and sound.
            let pack = try PackFile(path: packPath(dir), writable: false)
            let report = try BlockAudit.run(db, blobs: try BlobStore(root: dir.path + "/state/blobs"), pack: pack)
            #expect(report.checked == 2 && report.isSound, "\(report.findings)")
        }
        let size = try FileIO.status(packPath(dir)).st_size
        let again = try logic.makeFS(dir)
        #expect(try contents(again, a.ino) == first)
        #expect(try contents(again, b.ino) == second)
        #expect(try packedRows(dir) == 2)
        #expect(try FileIO.status(packPath(dir)).st_size == size, "no byte of the pack was cut or added")
        try again.catalog.withDatabaseUnchecked { c in
            let report = try BlockAudit.run(c.db, blobs: again.blobs, pack: c.pack)
            #expect(report.checked == 2 && report.isSound, "\(report.findings)")
        }
        // A block dropped with its file frees its range; a new one is placed by its row.
        try again.unlink(parent: 1, name: Array("a.h".utf8))
        again.collectGarbage()
        #expect(try packedRows(dir) == 1)
        let third = pseudoRandomBytes(5_000, seed: 9)
        let c = try logic.store(again, "c.h", third)
        #expect(try contents(again, c.ino) == third)
        #expect(try contents(again, b.ino) == second)
        again.shutdown()
        let db = try Database(path: catalogPath, options: .init(readOnly: true, create: false))
        #expect(try db.queryOne("SELECT count(*) FROM sqlite_schema WHERE name IN ('packed_blocks', 'blocks_delete_packed')") { $0.int(0) } == 0)
    }

    @Test func aSmallFileHasNoBlockFileAndReadsBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(13_000, seed: 1)
        let a = try logic.store(fs, "small.h", bytes)
        #expect(!fs.blobStore.contains(SHA256Hasher.digest(bytes)))
        #expect(try fs.blobStore.allDigests().isEmpty)
        #expect(try packedRows(dir) == 1)
        #expect(try contents(fs, a.ino) == bytes)
        #expect(try fs.getattr(a.ino).content == ContentHash.of(bytes: bytes))
        // The same bytes twice: one row. Both gone: no row.
        let b = try logic.store(fs, "copy.h", bytes)
        #expect(try packedRows(dir) == 1)
        try fs.unlink(parent: 1, name: Array("small.h".utf8))
        try fs.unlink(parent: 1, name: Array("copy.h".utf8))
        fs.forget(a.ino, count: 1); fs.forget(b.ino, count: 1)
        fs.collectGarbage()
        #expect(try packedRows(dir) == 0)
        fs.shutdown()
    }

    /// An open handle reads a small file's block from memory, read once from the pack:
    /// pieces at any offset, past the end, and, after another handle rewrote the file,
    /// the new bytes (a commit drops what the open file kept).
    @Test func piecesOfASmallFileReadFromOneHandleAndAfterARewrite() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(40_000, seed: 3)
        let a = try logic.store(fs, "piece.bin", bytes)
        let fh = try fs.open(a.ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        for (offset, count) in [(0, 1), (1, 4095), (39_999, 10), (12_345, 20_000), (40_000, 5), (0, 40_000)] {
            let got = try logic.read(fs, fh, count: count, at: Int64(offset))
            #expect(got == Array(bytes[min(offset, bytes.count)..<min(bytes.count, offset + count)]), "\(count) bytes at \(offset)")
        }
        let rewritten = pseudoRandomBytes(30_000, seed: 4)
        try changing(fs, a.ino) { w in
            _ = try fs.setattr(a.ino, { var c = AttributeChanges(); c.size = 0; return c }(), handle: w)
            _ = try rewritten.withUnsafeBytes { try fs.write(w, $0, at: 0) }
        }
        #expect(try logic.read(fs, fh, count: 40_000, at: 0) == rewritten)
        #expect(try logic.read(fs, fh, count: 100, at: 29_950) == Array(rewritten[29_950...]))
        #expect(try packedRows(dir) == 1)
    }

    @Test func aFileThatGrowsPastTheLimitGetsABlockFileAndOneThatShrinksBackDoesNot() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(200_000, seed: 2)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("grows".utf8), mode: 0o644, uid: 0, gid: 0)
        // Written in order in small pieces: staged in memory first, moved to the disk
        // when it passes 64 KiB, hashed while written all along.
        for start in stride(from: 0, to: bytes.count, by: 10_000) {
            try logic.write(fs, fh, Array(bytes[start..<min(start + 10_000, bytes.count)]), at: Int64(start))
        }
        // Read while written, across the move.
        #expect(try logic.read(fs, fh, count: 100, at: 60_000) == Array(bytes[60_000..<60_100]))
        try fs.flush(fh)
        fs.release(fh)
        #expect(fs.statistics.blocksHashedByReading == 0)
        #expect(fs.blobStore.contains(SHA256Hasher.digest(bytes)))
        #expect(try packedRows(dir) == 0)
        #expect(try contents(fs, a.ino) == bytes)

        // Truncated to 1,000 bytes: the stored block is copied, cut, and stored again.
        try resize(fs, a.ino, to: 1_000)
        #expect(try contents(fs, a.ino) == Array(bytes[0..<1_000]))
        fs.shutdown()
    }

    /// One write appending past the limit, or one truncate up past it, to a small file
    /// whose block is packed: the grown block is a block file, never a packed
    /// row above the limit. (The kernel's page cache used to split such an append at the
    /// first page boundary, which hid this; a write-only handle's direct I/O does not.)
    @Test func aSmallFileGrownPastTheLimitInOneStepGetsABlockFile() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        var appended = pseudoRandomBytes(20_000, seed: 4)
        let a = try logic.store(fs, "log.txt", appended)
        let more = pseudoRandomBytes(60_000, seed: 5)
        try changing(fs, a.ino) { fh in try logic.write(fs, fh, more, at: Int64(appended.count)) }
        appended += more
        #expect(try contents(fs, a.ino) == appended)
        #expect(fs.blobStore.contains(SHA256Hasher.digest(appended)))

        let small = pseudoRandomBytes(1_000, seed: 6)
        let b = try logic.store(fs, "sparse.bin", small)
        try resize(fs, b.ino, to: 100_000)
        let grown = small + [UInt8](repeating: 0, count: 99_000)
        #expect(try contents(fs, b.ino) == grown)
        #expect(fs.blobStore.contains(SHA256Hasher.digest(grown)))
        #expect(try packedRows(dir) == 0, "no block above the limit is packed")
        fs.shutdown()
    }

    @Test func aPartialOverwriteOfASmallFileCopiesItsBlockFromThePack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        var bytes = pseudoRandomBytes(30_000, seed: 3)
        let a = try logic.store(fs, "doc.txt", bytes)
        try changing(fs, a.ino) { fh in try logic.write(fs, fh, [1, 2, 3, 4], at: 10_000) }
        bytes.replaceSubrange(10_000..<10_004, with: [1, 2, 3, 4])
        #expect(try contents(fs, a.ino) == bytes)
        #expect(try packedRows(dir) == 1, "the old version's block went with its last reference")
        #expect(try fs.blobStore.allDigests().isEmpty)
        fs.shutdown()
    }

    @Test func photosAreBlockFilesWhateverTheirSize() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let bytes = pseudoRandomBytes(2_000, seed: 4)
        let a = try logic.store(fs, "tiny.png", in: roll.ino, bytes)
        #expect(fs.blobStore.contains(SHA256Hasher.digest(bytes)))
        #expect(try packedRows(dir) == 0)
        #expect(try contents(fs, a.ino) == bytes)
        fs.shutdown()
    }

    @Test func theBackupReadsASmallBlockFromThePack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(5_000, seed: 5)
        _ = try logic.store(fs, "notes.txt", bytes)
        let stored = StoredBlocks(blobs: fs.blobStore, catalogPath: fs.catalogPath)
        let fd = try stored.open(SHA256Hasher.digest(bytes))
        defer { close(fd) }
        var back = [UInt8](repeating: 0, count: 6_000)
        let n = back.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 6_000, 0) }
        #expect(n == 5_000 && Array(back[0..<5_000]) == bytes)
        #expect(throws: Errno.noSuchFileOrDirectory) { _ = try stored.open(SHA256Hasher.digest([9, 9, 9])) }
        fs.shutdown()
    }

    /// Small files' bytes go to the pack, not through the catalog's WAL: 100 files of 50 KB
    /// add megabytes to the pack and a few rows' worth to the catalog's files.
    @Test func smallFilesBytesGoToThePackNotTheCatalog() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state", flushInterval: 0.2)
        _ = try fs.recover()
        fs.startBackgroundWork()
        let database = dir.path + "/state/catalog.sqlite"
        func catalogBytes() -> Int64 {
            ["", "-wal"].reduce(0) { $0 + Int64((try? FileIO.status(database + $1).st_size) ?? 0) }
        }
        let before = catalogBytes()
        for i in 0..<100 {
            _ = try logic.store(fs, "f\(i)", pseudoRandomBytes(50_000, seed: UInt64(1_000 + 7 * i)))
        }
        #expect(try FileIO.status(packPath(dir)).st_size >= 100 * 50_000)
        #expect(catalogBytes() - before < 2_000_000, "the catalog grew by \(catalogBytes() - before) bytes for 5 MB of small files")
        fs.shutdown()
        let again = try logic.makeFS(dir)
        for i in 0..<100 {
            let a = try again.lookup(parent: 1, name: Array("f\(i)".utf8))
            #expect(try contents(again, a.ino) == pseudoRandomBytes(50_000, seed: UInt64(1_000 + 7 * i)))
        }
        again.shutdown()
    }

    /// A block that goes gives its range's disk blocks back (a hole punched in the pack),
    /// only once the transaction dropping its row committed; the other blocks read on.
    @Test func aDroppedBlockFreesItsRangeOfThePack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let kept = pseudoRandomBytes(30_000, seed: 11)
        let goes = pseudoRandomBytes(60_000, seed: 12)
        let a = try logic.store(fs, "kept", kept)
        let b = try logic.store(fs, "goes", goes)
        let held = try packDiskBlocks(dir)
        #expect(held >= Int64(90_000 / 512))
        try fs.unlink(parent: 1, name: Array("goes".utf8))
        fs.forget(b.ino, count: 1)
        fs.collectGarbage()
        #expect(try packedRows(dir) == 1)
        let after = try packDiskBlocks(dir)
        #expect(after <= held - Int64(56 * 1024 / 512), "the pack holds \(after) disk blocks, \(held) before")
        #expect(try contents(fs, a.ino) == kept)
        // The same bytes saved again are appended again, at a new place.
        let c = try logic.store(fs, "back", goes)
        #expect(try contents(fs, c.ino) == goes)
        fs.shutdown()
    }

    /// A change that appended bytes and then failed: its bytes are freed with its rollback,
    /// and only its own: the change before it in the same open group keeps its bytes, read
    /// back before and after the group's commit and after a remount.
    @Test func aRolledBackChangeFreesOnlyTheBytesItAppended() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        fs.startBackgroundWork(groupCommitWindow: 60)
        let kept = pseudoRandomBytes(40_000, seed: 21)
        let a = try logic.store(fs, "kept", kept)
        let held = try packDiskBlocks(dir)
        struct Refused: Error {}
        let doomed = pseudoRandomBytes(48_000, seed: 22)
        #expect(throws: Refused.self) {
            try fs.catalog.withDatabase { locked in
                try locked.db.transaction {
                    // As a commit does: the block's row, then its bytes.
                    _ = try locked.db.run("INSERT INTO blocks(hash, size, refs, gen) VALUES (?, ?, 0, 0)", SHA256Hasher.digest(doomed).hex, doomed.count)
                    try doomed.withUnsafeBytes { try locked.storePacked(SHA256Hasher.digest(doomed), $0, damaged: false) }
                    throw Refused()
                }
            }
        }
        #expect(try packDiskBlocks(dir) == held, "the failed change's bytes are freed")
        #expect(try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(SHA256Hasher.digest(kept), in: $0.db) } != nil)
        #expect(try contents(fs, a.ino) == kept)
        try fs.syncAll()
        #expect(try contents(fs, a.ino) == kept)
        fs.shutdown()
        let again = try logic.makeFS(dir)
        #expect(try contents(again, a.ino) == kept)
        again.shutdown()
    }

    /// Blocks fetched ahead are appended to the pack before the catalog records them, a
    /// batch at a time: a block the pack holds sound already keeps its place (the bytes
    /// appended again are freed), and a batch the catalog refuses leaves none of its
    /// bytes behind and none of its blocks recorded.
    @Test func fetchedBytesAppendedBeforeTheirRowsAreNamedOrFreed() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let kept = pseudoRandomBytes(30_000, seed: 31)
        let a = try logic.store(fs, "kept", kept)
        let digest = SHA256Hasher.digest(kept)
        let place = try #require(try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(digest, in: $0.db) })
        try fs.syncAll()
        let held = try packDiskBlocks(dir)

        // The same block again, as a second fetch of it would bring it.
        let again = try kept.withUnsafeBytes { try fs.catalog.pack.append($0) }
        try fs.catalog.adoptFetchedPacked([PackedArrival(digest: digest, range: PackRange(offset: again, length: kept.count))])
        try fs.syncAll()
        #expect(try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(digest, in: $0.db) } == place)
        #expect(try packDiskBlocks(dir) == held, "the second copy's bytes are freed")

        // Two online-only rows, as files that came from another device make them; the
        // second says another size than its bytes have (a damaged catalog).
        let online = pseudoRandomBytes(9_000, seed: 32)
        let odd = pseudoRandomBytes(7_000, seed: 33)
        try fs.catalog.withDatabase { locked in
            for (bytes, size) in [(online, online.count), (odd, odd.count + 1)] {
                _ = try locked.db.run("INSERT INTO blocks(hash, size, refs, gen, resident) VALUES (?, ?, 1, 0, 0)", SHA256Hasher.digest(bytes).hex, size)
            }
        }
        let arrivals = try [online, odd].map { bytes in
            PackedArrival(digest: SHA256Hasher.digest(bytes),
                          range: PackRange(offset: try bytes.withUnsafeBytes { try fs.catalog.pack.append($0) }, length: bytes.count))
        }
        #expect(throws: Errno.ioError) { try fs.catalog.adoptFetchedPacked(arrivals) }
        try fs.syncAll()
        #expect(try packDiskBlocks(dir) == held, "the refused batch's bytes are freed")
        #expect(try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(SHA256Hasher.digest(online), in: $0.db) } == nil)
        #expect(try fs.catalog.withDatabaseUnchecked {
            try $0.db.queryOne("SELECT resident FROM blocks WHERE hash = ?", SHA256Hasher.digest(online).hex) { $0.int(0) }
        } == 0, "nothing of the refused batch recorded")
        #expect(try contents(fs, a.ino) == kept)
        fs.shutdown()
    }

    /// A kill after bytes were appended and before a commit named them: the next open cuts
    /// them off; what rows name stays.
    @Test func bytesNoRowNamesAreCutAtTheNextOpen() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(10_000, seed: 13)
        let a = try logic.store(fs, "kept", bytes)
        fs.shutdown()
        try writeIntoPack(dir, pseudoRandomBytes(50_000, seed: 14), at: 12_288)
        let again = try logic.makeFS(dir)
        #expect(try FileIO.status(packPath(dir)).st_size == 12_288)
        #expect(try contents(again, a.ino) == bytes)
        let b = try logic.store(again, "next", pseudoRandomBytes(3_000, seed: 15))
        #expect(try contents(again, b.ino) == pseudoRandomBytes(3_000, seed: 15))
        again.shutdown()
    }

    /// After a kill (no clean shutdown), the check re-hashes packed blocks newer than the
    /// last flush, as it does block files: sound bytes read on; bytes the kernel never wrote
    /// (here: overwritten) are marked damaged, their file is reported, and its reads fail
    /// instead of serving them. Saved again, the block heals: new bytes, a new range.
    @Test func theCheckAfterAnUncleanStopHashesPackedBlocks() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        var kept: UInt64 = 0, lost: UInt64 = 0
        let good = pseudoRandomBytes(20_000, seed: 6)
        let bad = pseudoRandomBytes(8_000, seed: 7)
        var range: PackRange?
        do {
            let fs = try logic.makeFS(dir)
            kept = try logic.store(fs, "kept", good).ino
            lost = try logic.store(fs, "lost", bad).ino
            range = try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(SHA256Hasher.digest(bad), in: $0.db) }
            // No shutdown: the process "dies" here.
        }
        let r = try #require(range)
        try writeIntoPack(dir, [UInt8](repeating: 0, count: r.length), at: r.offset)
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        let reported = try fs.recover()
        #expect(reported.count == 1 && reported.first?.hasSuffix("lost") == true, "reported: \(reported)")
        #expect(try contents(fs, kept) == good)
        #expect(throws: Errno.ioError) { _ = try contents(fs, lost) }
        let healed = try logic.store(fs, "again", bad)
        #expect(try contents(fs, healed.ino) == bad)
        #expect(try contents(fs, lost) == bad)
        let moved = try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(SHA256Hasher.digest(bad), in: $0.db) }
        #expect(moved != nil && moved != r)
        fs.shutdown()
    }
}

/// The same through a real mount: what `cp`, `>>`, `truncate`, `ln` and a remount do to
/// a small file, with its bytes in the pack and block files only once it is large.
@Suite(.tags(.mount), .needsMount, .serialized) struct InlineBlockMountTests {
    @Test func smallFilesThroughTheMount() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let store = try BlobStore(root: drive.state + "/blobs")
        let notes = drive.path("notes.txt")
        var bytes = pseudoRandomBytes(20_000, seed: 50)
        try writeFile(notes, bytes)
        #expect(try readFile(notes) == bytes)
        #expect(try store.allDigests().isEmpty, "a small file has no block file")

        // Appended past 64 KiB: a block file; cut back: in the pack again.
        let more = pseudoRandomBytes(60_000, seed: 51)
        try writeFile(notes, more, flags: O_WRONLY | O_APPEND)
        bytes += more
        #expect(try readFile(notes) == bytes)
        #expect(try store.allDigests() == [SHA256Hasher.digest(bytes)])
        #expect(truncate(notes, 1_000) == 0)
        bytes = Array(bytes[0..<1_000])
        #expect(try readFile(notes) == bytes)
        for _ in 0..<50 where try !store.allDigests().isEmpty { usleep(100_000) }
        #expect(try store.allDigests().isEmpty, "the large version's block went with it")

        // A second name, the first removed, then a remount: the bytes stay.
        #expect(link(notes, drive.path("kept.txt")) == 0)
        #expect(unlink(notes) == 0)
        try drive.unmount()
        try drive.start()
        #expect(try readFile(drive.path("kept.txt")) == bytes)
    }
}
