import Foundation
import Crypto
import Storage

/// drive-002: moves a catalog of whole-file blobs (drive-001) to content blocks.
///
/// A blob of at most 4 MiB is already its own block: same bytes, same name, same file,
/// so it is referenced as it is (no copy, no read). A bigger blob is read once and cut
/// into 4 MiB blocks, each written into the store by its own digest (fsynced before the
/// transaction commits); its old file is removed only after the migration committed
/// (`removeSplitBlobFiles`), so a kill at any point leaves either the old catalog with
/// its blob or the new one with its blocks. Zero blocks become holes.
///
/// `legacy_blobs` keeps the map from each old blob hash to its content hash and block
/// list: the backup wiring's migration (wiring-2) uses it to move queued items forward,
/// and a later open removes the split blob files it lists.
enum BlockMigration {
    @Sendable static func run(_ db: Database) throws {
        let store = try BlobStore(root: blobsRoot(forCatalog: db.path))
        let blobs = try db.query("SELECT hash, size, gen, damaged FROM blobs") {
            (hash: $0.string(0) ?? "", size: $0.int64(1), gen: $0.int64(2), damaged: $0.int64(3))
        }
        for blob in blobs {
            guard let digest = SHA256Digest(hex: blob.hash) else { continue }
            var list: [SHA256Digest]
            var split = 0
            if blob.size <= Int64(Blocks.size) {
                list = [digest]
                if !Blocks.isZero(digest, length: Int(blob.size)) {
                    try db.run("INSERT INTO blocks(hash, size, refs, gen, damaged) VALUES (?, ?, 0, ?, ?) ON CONFLICT(hash) DO NOTHING",
                               blob.hash, blob.size, blob.gen, blob.damaged)
                }
            } else if let blocks = try? splitIntoBlocks(digest, size: blob.size, store: store), blob.damaged == 0 {
                list = blocks
                split = 1
                for (i, b) in blocks.enumerated() where !Blocks.isZero(b, length: Blocks.length(ofBlock: i, fileSize: blob.size)) {
                    try db.run("INSERT INTO blocks(hash, size, refs, gen, damaged) VALUES (?, ?, 0, ?, 0) ON CONFLICT(hash) DO NOTHING",
                               b.hex, Blocks.length(ofBlock: i, fileSize: blob.size), blob.gen)
                }
            } else {
                // Missing or damaged and too big to keep as one block: every block of the
                // file names the old (damaged) hash, so each read fails with EIO rather than
                // serving zeros in its place. A restore from the backup replaces it.
                list = Array(repeating: digest, count: Blocks.count(forSize: blob.size))
                try db.run("INSERT INTO blocks(hash, size, refs, gen, damaged) VALUES (?, ?, 0, ?, 1) ON CONFLICT(hash) DO NOTHING",
                           blob.hash, blob.size, blob.gen)
            }
            let content = ContentHash.of(blocks: list)
            try db.run("INSERT INTO legacy_blobs(hash, content, blocks, split) VALUES (?, ?, ?, ?)",
                       blob.hash, content.hex, jsonList(list), split)
            // Which indices have a stored block (a hole has no row); a damaged big blob
            // names its damaged hash at every index.
            let lost = list.count > 1 && split == 0
            let stored = list.enumerated().filter { i, b in
                lost || !Blocks.isZero(b, length: Blocks.length(ofBlock: i, fileSize: blob.size))
            }
            let inos = try db.query("SELECT ino FROM inodes WHERE blob = ?", blob.hash) { $0.int64(0) }
            for ino in inos {
                for (i, b) in stored {
                    try db.run("INSERT INTO file_blocks(ino, idx, hash) VALUES (?, ?, ?)", ino, i, b.hex)
                }
                let stored = stored.reduce(Int64(0)) { $0 + Int64(Blocks.length(ofBlock: $1.offset, fileSize: blob.size)) }
                try db.run("UPDATE inodes SET content = ?, stored = ? WHERE ino = ?", content.hex, stored, ino)
            }
        }
        try db.run("""
            UPDATE camera_changes SET hash = (SELECT content FROM legacy_blobs l WHERE l.hash = camera_changes.hash)
            WHERE hash IN (SELECT hash FROM legacy_blobs)
            """)
    }

    /// The blob store folder next to a catalog database (`<state>/blobs`).
    static func blobsRoot(forCatalog path: String) -> String {
        (path as NSString).deletingLastPathComponent + "/blobs"
    }

    /// Reads a blob once and stores its non-zero 4 MiB pieces as blocks (fsynced).
    private static func splitIntoBlocks(_ digest: SHA256Digest, size: Int64, store: BlobStore) throws -> [SHA256Digest] {
        let fd = try store.open(digest)
        defer { FileIO.close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Blocks.size, alignment: 4096)
        defer { buffer.deallocate() }
        var list: [SHA256Digest] = []
        for index in 0..<Blocks.count(forSize: size) {
            let length = Blocks.length(ofBlock: index, fileSize: size)
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<length])
            // Short only at end of file: shorter than recorded, so treated as damaged.
            if try FileIO.pread(fd, into: piece, at: Int64(index) * Int64(Blocks.size)) < length { throw Errno.ioError }
            let block = SHA256Hasher()
            block.update(UnsafeRawBufferPointer(piece))
            let d = block.finish()
            list.append(d)
            if Blocks.isZero(d, length: length) || store.contains(d) { continue }
            let (out, path) = try store.makeStagingFile()
            do {
                try FileIO.pwrite(out, UnsafeRawBufferPointer(piece), at: 0)
                FileIO.close(out)
                try store.adopt(stagingPath: path, as: d, durable: true)
            } catch {
                FileIO.close(out)
                _ = unlink(path)
                throw error
            }
        }
        return list
    }

    /// After the migration committed: removes the old files of blobs that were split.
    static func removeSplitBlobFiles(_ db: Database, store: BlobStore) throws {
        let split = try db.query("SELECT hash FROM legacy_blobs WHERE split = 1") { $0.string(0) ?? "" }
        for hex in split {
            if let d = SHA256Digest(hex: hex) { store.remove(d) }
        }
        if !split.isEmpty { try db.run("UPDATE legacy_blobs SET split = 2 WHERE split = 1") }
    }

    static func jsonList(_ digests: [SHA256Digest]) -> String {
        "[" + digests.map { "\"\($0.hex)\"" }.joined(separator: ",") + "]"
    }
}
