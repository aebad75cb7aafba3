import Testing
import Foundation
import Crypto
import Storage
@testable import Drive

/// Tier one: content in blocks, called directly (no kernel): which blocks a change
/// touches, holes, and the migration of a whole-blob catalog made by drive-001.
@Suite(.tags(.logic)) struct BlockTests {
    let mib = 1 << 20

    func makeFS(_ dir: TemporaryDirectory) throws -> DriveFileSystem { try FileSystemLogicTests().makeFS(dir) }
    func write(_ fs: DriveFileSystem, _ fh: UInt64, _ bytes: [UInt8], at offset: Int64) throws {
        try FileSystemLogicTests().write(fs, fh, bytes, at: offset)
    }

    func readAll(_ fs: DriveFileSystem, _ ino: UInt64) throws -> [UInt8] {
        let size = Int(try fs.getattr(ino).size)
        let fh = try fs.open(ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        var out = [UInt8](repeating: 0xEE, count: size)
        var done = 0
        while done < size {
            let n = try out.withUnsafeMutableBytes {
                try fs.read(fh, into: UnsafeMutableRawBufferPointer(rebasing: $0[done..<min(size, done + mib)]), at: Int64(done))
            }
            if n == 0 { break }
            done += n
        }
        return Array(out[0..<done])
    }

    func newFile(_ fs: DriveFileSystem, _ name: String, _ bytes: [UInt8]) throws -> UInt64 {
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, bytes, at: 0)
        try fs.flush(fh)
        fs.release(fh)
        return a.ino
    }

    @Test func contentHashIsTheHashOfBlockDigests() {
        // The definition in Docs/protocol.md, with its test vectors.
        #expect(ContentHash.of(bytes: []).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        let abc = Array("abc".utf8)
        #expect(ContentHash.of(bytes: abc) == SHA256Hasher.digest(SHA256Hasher.digest(abc).bytes))
        let bytes = pseudoRandomBytes(Blocks.size + 5, seed: 3)
        let first = SHA256Hasher.digest(Array(bytes[0..<Blocks.size]))
        let second = SHA256Hasher.digest(Array(bytes[Blocks.size...]))
        #expect(ContentHash.of(bytes: bytes) == SHA256Hasher.digest(first.bytes + second.bytes))
    }

    @Test func anOverwriteRewritesOnlyTheBlockItTouches() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        var bytes = pseudoRandomBytes(3 * Blocks.size + 100, seed: 7)
        let ino = try newFile(fs, "big", bytes)
        let before = Set(try fs.blobs.allDigests())
        #expect(before.count == 4)

        let fh = try fs.open(ino, writable: true, truncate: false)
        let patch = [UInt8](repeating: 0xAB, count: 4096)
        try write(fs, fh, patch, at: Int64(Blocks.size + 12345))
        try fs.flush(fh)
        fs.release(fh)
        bytes.replaceSubrange((Blocks.size + 12345)..<(Blocks.size + 12345 + 4096), with: patch)

        let after = Set(try fs.blobs.allDigests())
        #expect(after.subtracting(before).count == 1, "one new block")
        #expect(before.subtracting(after).count == 1, "the replaced block is freed")
        #expect(try readAll(fs, ino) == bytes)
        #expect(try fs.getattr(ino).content == ContentHash.of(bytes: bytes))
        #expect(fs.statistics.blocksHashedByReading == 1, "only the touched block is read back")
    }

    @Test func holesStoreNothingAndReadAsZeros() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let ino = try newFile(fs, "sparse", [])
        let size: Int64 = 2 << 30
        _ = try fs.setattr(ino, { var c = AttributeChanges(); c.size = size; return c }(), handle: nil)
        #expect(try fs.blobs.allDigests().isEmpty)
        let zeros = (0..<Blocks.count(forSize: size)).map { _ in Blocks.zeroDigest(length: Blocks.size) }
        #expect(try fs.getattr(ino).content == ContentHash.of(blocks: zeros))

        // One byte in the middle stores one block; an explicitly written zero block stores none.
        let fh = try fs.open(ino, writable: true, truncate: false)
        try write(fs, fh, [7], at: size / 2)
        try write(fs, fh, [UInt8](repeating: 0, count: Blocks.size), at: 0)
        try fs.flush(fh)
        let reader = try fs.open(ino, writable: false, truncate: false)
        var buffer = [UInt8](repeating: 0xEE, count: 3)
        _ = try buffer.withUnsafeMutableBytes { try fs.read(reader, into: $0, at: size / 2 - 1) }
        #expect(buffer == [0, 7, 0])
        fs.release(reader); fs.release(fh)
        #expect(try fs.blobs.allDigests().count == 1)
        #expect(try fs.getattr(ino).stored == Int64(Blocks.size), "st_blocks counts the one stored block, not the holes")
    }

    @Test func shrinkThenGrowNeverBringsOldBytesBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let bytes = pseudoRandomBytes(2 * Blocks.size + 10, seed: 11)
        let ino = try newFile(fs, "f", bytes)
        let fh = try fs.open(ino, writable: true, truncate: false)
        _ = try fs.setattr(ino, { var c = AttributeChanges(); c.size = 100; return c }(), handle: fh)
        _ = try fs.setattr(ino, { var c = AttributeChanges(); c.size = Int64(bytes.count); return c }(), handle: fh)
        try fs.flush(fh)
        fs.release(fh)
        let expected = Array(bytes[0..<100]) + [UInt8](repeating: 0, count: bytes.count - 100)
        #expect(try readAll(fs, ino) == expected)
        #expect(try fs.getattr(ino).content == ContentHash.of(bytes: expected))
        #expect(try fs.blobs.allDigests().count == 1, "only the first block, shortened, then zero-extended")
    }

    @Test func appendingToAShortLastBlockExtendsIt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        var bytes = pseudoRandomBytes(Blocks.size + 1000, seed: 13)
        let ino = try newFile(fs, "log", bytes)
        let fh = try fs.open(ino, writable: true, truncate: false)
        let line = Array("one more line\n".utf8)
        try write(fs, fh, line, at: Int64(bytes.count + 50))   // past the end: a gap of zeros
        try fs.flush(fh)
        fs.release(fh)
        bytes += [UInt8](repeating: 0, count: 50) + line
        #expect(try readAll(fs, ino) == bytes)
        #expect(try fs.getattr(ino).content == ContentHash.of(bytes: bytes))
    }

    // MARK: Migration from drive-001 (one blob per file)

    @Test func aWholeBlobCatalogMovesToBlocks() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let state = dir.path + "/state"
        let store = try BlobStore(root: state + "/blobs")
        let small = pseudoRandomBytes(10_000, seed: 21)
        // 9 MiB + 5: a zero block in the middle becomes a hole.
        let big = pseudoRandomBytes(Blocks.size, seed: 22) + [UInt8](repeating: 0, count: Blocks.size) + pseudoRandomBytes(mib + 5, seed: 23)
        let smallDigest = try storeWholeBlob(small, in: store)
        let bigDigest = try storeWholeBlob(big, in: store)
        do {
            // The catalog exactly as drive-001 made it (its SQL is shipped, never edited).
            let db = try Database(path: state + "/catalog.sqlite")
            try db.migrate([CatalogSchema.migrations[0]])
            try db.run("INSERT INTO inodes(ino, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns) VALUES (1, ?, 0, 0, 2, 0, 0, 0)", UInt32(S_IFDIR) | 0o755)
            try db.run("INSERT INTO blobs(hash, size, refs, gen) VALUES (?, ?, 0, 1), (?, ?, 0, 2)", smallDigest.hex, small.count, bigDigest.hex, big.count)
            for (ino, name, digest, size) in [(2, "small", smallDigest, small.count), (3, "big", bigDigest, big.count), (4, "copy", smallDigest, small.count)] {
                try db.run("INSERT INTO inodes(ino, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, blob) VALUES (?, ?, 0, 0, ?, 1, 0, 0, 0, ?)",
                           ino, UInt32(S_IFREG) | 0o644, size, digest.hex)
                try db.run("INSERT INTO entries(parent, name, ino) VALUES (1, ?, ?)", Array(name.utf8), ino)
            }
            try db.run("INSERT INTO drive_meta(key, value) VALUES ('created_ns', 0)")
        }

        let fs = try makeFS(dir)
        #expect(try readAll(fs, 2) == small)
        #expect(try readAll(fs, 3) == big)
        #expect(try readAll(fs, 4) == small)
        #expect(try fs.getattr(2).content == ContentHash.of(bytes: small))
        #expect(try fs.getattr(3).content == ContentHash.of(bytes: big))
        // The small blob is its own block, in place; the big one was split and its file removed.
        #expect(fs.blobs.contains(smallDigest))
        #expect(!fs.blobs.contains(bigDigest))
        #expect(try fs.blobs.allDigests().count == 3, "small + two non-zero blocks of big")
        #expect(try fs.catalog.withDatabase {
            try $0.db.queryOne("SELECT refs FROM blocks WHERE hash = ?", smallDigest.hex) { $0.int64(0) }
        } == 2)
        // Freeing works on migrated blocks as on new ones.
        try fs.unlink(parent: 1, name: Array("big".utf8))
        #expect(try fs.blobs.allDigests() == [smallDigest])
    }
}
