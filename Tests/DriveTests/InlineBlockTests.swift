import Testing
import Foundation
import Crypto
import Storage
@testable import Drive

/// Small files keep their block in the catalog (Sources/Drive/InlineBlocks.swift): no
/// block file, the same bytes back, block files again once a file outgrows the limit,
/// photos always as files, and every reader of blocks (reads, copy-on-write, the
/// backup's `StoredBlocks`) served from the catalog.
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

    func inlineRows(_ dir: TemporaryDirectory) throws -> Int {
        let db = try Database(path: dir.path + "/state/catalog.sqlite", options: .init(readOnly: true, create: false))
        return try db.queryOne("SELECT count(*) FROM inline_blocks") { $0.int(0) } ?? -1
    }

    /// A catalog made when the bytes were a WITHOUT ROWID table: moved to the rowid table
    /// at the first mount, the same bytes read back, the trigger that drops them with
    /// their block still in place, and a new small file stored beside them.
    @Test func smallBlocksOfAnOlderCatalogMoveToTheRowidTableAndReadBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(20_000, seed: 5)
        let a = try logic.store(fs, "old.h", bytes)
        fs.shutdown()
        do {
            // Back to the table as drive-005 made it, and the record of drive-007 taken away.
            let db = try Database(path: dir.path + "/state/catalog.sqlite")
            try db.execute("""
                CREATE TABLE inline_blocks_old (hash TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
                INSERT INTO inline_blocks_old SELECT hash, data FROM inline_blocks;
                DROP TRIGGER blocks_delete_inline;
                DROP TABLE inline_blocks;
                ALTER TABLE inline_blocks_old RENAME TO inline_blocks;
                CREATE TRIGGER blocks_delete_inline AFTER DELETE ON blocks BEGIN DELETE FROM inline_blocks WHERE hash = OLD.hash; END;
                DELETE FROM schema_migrations WHERE name = 'drive-007-inline-blocks-by-rowid';
                """)
            #expect(try db.queryOne("SELECT count(*) FROM sqlite_schema WHERE name = 'inline_blocks' AND sql LIKE '%WITHOUT ROWID%'") { $0.int(0) } == 1)
        }
        let again = try logic.makeFS(dir)
        #expect(try contents(again, a.ino) == bytes)
        #expect(try inlineRows(dir) == 1)
        let other = pseudoRandomBytes(9_000, seed: 6)
        let b = try logic.store(again, "new.h", other)
        #expect(try contents(again, b.ino) == other)
        #expect(try inlineRows(dir) == 2)
        try again.unlink(parent: 1, name: Array("old.h".utf8))
        again.collectGarbage()
        #expect(try inlineRows(dir) == 1)
        again.shutdown()
        let db = try Database(path: dir.path + "/state/catalog.sqlite", options: .init(readOnly: true, create: false))
        #expect(try db.queryOne("SELECT count(*) FROM sqlite_schema WHERE name = 'inline_blocks' AND sql LIKE '%WITHOUT ROWID%'") { $0.int(0) } == 0)
    }

    @Test func aSmallFileHasNoBlockFileAndReadsBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        let bytes = pseudoRandomBytes(13_000, seed: 1)
        let a = try logic.store(fs, "small.h", bytes)
        #expect(!fs.blobStore.contains(SHA256Hasher.digest(bytes)))
        #expect(try fs.blobStore.allDigests().isEmpty)
        #expect(try inlineRows(dir) == 1)
        #expect(try contents(fs, a.ino) == bytes)
        #expect(try fs.getattr(a.ino).content == ContentHash.of(bytes: bytes))
        // The same bytes twice: one row. Both gone: no row.
        let b = try logic.store(fs, "copy.h", bytes)
        #expect(try inlineRows(dir) == 1)
        try fs.unlink(parent: 1, name: Array("small.h".utf8))
        try fs.unlink(parent: 1, name: Array("copy.h".utf8))
        fs.forget(a.ino, count: 1); fs.forget(b.ino, count: 1)
        fs.collectGarbage()
        #expect(try inlineRows(dir) == 0)
        fs.shutdown()
    }

    /// An open handle reads a small file's block from memory, read once from the catalog:
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
        #expect(try inlineRows(dir) == 1)
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
        #expect(try inlineRows(dir) == 0)
        #expect(try contents(fs, a.ino) == bytes)

        // Truncated to 1,000 bytes: the stored block is copied, cut, and stored again.
        try resize(fs, a.ino, to: 1_000)
        #expect(try contents(fs, a.ino) == Array(bytes[0..<1_000]))
        fs.shutdown()
    }

    /// One write appending past the limit, or one truncate up past it, to a small file
    /// whose block is in the catalog: the grown block is a block file, never a catalog
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
        #expect(try inlineRows(dir) == 0, "no block above the limit is kept in the catalog")
        fs.shutdown()
    }

    @Test func aPartialOverwriteOfASmallFileCopiesItsBlockFromTheCatalog() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        var bytes = pseudoRandomBytes(30_000, seed: 3)
        let a = try logic.store(fs, "doc.txt", bytes)
        try changing(fs, a.ino) { fh in try logic.write(fs, fh, [1, 2, 3, 4], at: 10_000) }
        bytes.replaceSubrange(10_000..<10_004, with: [1, 2, 3, 4])
        #expect(try contents(fs, a.ino) == bytes)
        #expect(try inlineRows(dir) == 1, "the old version's block went with its last reference")
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
        #expect(try inlineRows(dir) == 0)
        #expect(try contents(fs, a.ino) == bytes)
        fs.shutdown()
    }

    @Test func theBackupReadsASmallBlockFromTheCatalog() throws {
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

    /// Small files' bytes go through the WAL: the flusher copies it into the database
    /// file in the background (a checkpoint in a commit would hold every request).
    @Test func theFlusherCheckpointsTheCatalogInTheBackground() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state", flushInterval: 0.2)
        _ = try fs.recover()
        fs.startBackgroundWork()
        let database = dir.path + "/state/catalog.sqlite"
        func size() -> Int64 { Int64((try? FileIO.status(database).st_size) ?? 0) }
        let before = size()
        var distinct = Set<[UInt8]>()
        for i in 0..<100 {
            let bytes = pseudoRandomBytes(50_000, seed: UInt64(1_000 + 7 * i))
            distinct.insert(bytes)
            _ = try logic.store(fs, "f\(i)", bytes)
        }
        // Megabytes in the WAL, far below the commits' own backstop (64 MB).
        let expected = Int64(distinct.count * 50_000)
        #expect(expected >= 2_000_000)
        var grown = false
        for _ in 0..<100 where !grown {
            usleep(100_000)
            grown = size() - before >= expected * 9 / 10
        }
        #expect(grown, "the database file grew by \(size() - before) bytes for \(expected) bytes of small files")
        fs.shutdown()
    }

    /// After a kill (no clean shutdown), the check re-hashes block files newer than the
    /// last flush; a block kept in the catalog has no file and is never called damaged.
    @Test func theCheckAfterAnUncleanStopLeavesCatalogBlocksAlone() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        var ino: UInt64 = 0
        let bytes = pseudoRandomBytes(20_000, seed: 6)
        do {
            let fs = try logic.makeFS(dir)
            ino = try logic.store(fs, "kept", bytes).ino
            // No shutdown: the process "dies" here.
        }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        #expect(try fs.recover().isEmpty)
        #expect(try contents(fs, ino) == bytes)
        fs.shutdown()
    }
}

/// The same through a real mount: what `cp`, `>>`, `truncate`, `ln` and a remount do to
/// a small file, with its bytes in the catalog and block files only once it is large.
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

        // Appended past 64 KiB: a block file; cut back: in the catalog again.
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
