import Crypto
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `server-002-blocks`: moves a database made before content was cut into blocks
/// (one blob per file, named by `sha256sum` of its bytes) to blocks and manifests.
///
/// - The `blobs` table becomes `blocks` (same rows): a blob of at most `Blocks.size`
///   bytes IS a block already, its file stays where it is (`<root>/ab/<hex>`); it gets
///   a `contents` row whose single block is itself.
/// - A bigger blob is read once and split into block files, written through the
///   store's staging folder and adopted under their own hashes (durable before the
///   transaction commits). A kill midway leaves only complete, content-addressed block
///   files, so running the migration again finds them and goes on. The old file is
///   listed in `obsolete_blobs` and removed by `removeObsolete` after the commit.
/// - Empty and all-zero blobs are not blocks (zero blocks are never stored): their
///   rows go, their files are listed as obsolete.
/// - `files.hash` is rewritten to content hashes; uploads longer than a block are
///   dropped (their device asks again, per block; nothing already stored is re-sent).
enum BlockMigration {
    static func migration(blobRoot: String) -> Migration {
        Migration("server-002-blocks", """
        ALTER TABLE blobs RENAME TO blocks;
        CREATE TABLE contents (hash TEXT PRIMARY KEY, size INTEGER NOT NULL, blocks TEXT NOT NULL, created_at INTEGER NOT NULL);
        CREATE TABLE obsolete_blobs (hash TEXT PRIMARY KEY) WITHOUT ROWID;
        DELETE FROM uploads WHERE length > \(Blocks.size);
        """, code: { db in try run(db, store: try BlobStore(root: blobRoot)) })
    }

    static func run(_ db: Database, store: BlobStore) throws {
        let blobs = try db.query("SELECT hash, size, created_at FROM blocks") { ($0.string(0) ?? "", $0.int64(1), $0.int64(2)) }
        try db.execute("CREATE TEMP TABLE content_of (old TEXT PRIMARY KEY, new TEXT NOT NULL)")
        defer { try? db.execute("DROP TABLE IF EXISTS temp.content_of") }
        for (hex, size, created) in blobs {
            guard let digest = SHA256Digest(hex: hex) else { continue }
            var manifest: BlockManifest?
            if size > 0 && size <= Int64(Blocks.size) && !Blocks.isZero(digest, length: Int(size)) {
                manifest = BlockManifest(content: ContentHash.of(blocks: [digest]), size: size, blocks: [digest])
            } else {
                if size > Int64(Blocks.size) {
                    manifest = try split(digest, size: size, store: store, db: db, created: created)
                } else {
                    manifest = BlockManifest(content: ContentHash.of(blocks: size == 0 ? [] : [digest]), size: size, blocks: size == 0 ? [] : [digest])
                }
                try db.run("DELETE FROM blocks WHERE hash = ?", hex)
                try db.run("INSERT OR IGNORE INTO obsolete_blobs(hash) VALUES (?)", hex)
            }
            guard let manifest else { continue }
            try db.run("INSERT OR IGNORE INTO contents(hash, size, blocks, created_at) VALUES (?, ?, ?, ?)",
                       manifest.content.hex, manifest.size, Metadata.encodeBlockList(manifest.blocks), created)
            try db.run("INSERT OR REPLACE INTO temp.content_of(old, new) VALUES (?, ?)", hex, manifest.content.hex)
        }
        // Files whose blob row was gone: up to one block, the content hash follows from
        // the old hash alone; a bigger one keeps its old hash (not downloadable, as before).
        let orphans = try db.query("SELECT DISTINCT hash, size FROM files WHERE hash NOT IN (SELECT old FROM temp.content_of)") { ($0.string(0) ?? "", $0.int64(1)) }
        for (hex, size) in orphans where size <= Int64(Blocks.size) {
            guard let digest = SHA256Digest(hex: hex) else { continue }
            try db.run("INSERT OR REPLACE INTO temp.content_of(old, new) VALUES (?, ?)", hex, ContentHash.of(blocks: size == 0 ? [] : [digest]).hex)
        }
        // One statement, so a new hash is never taken for an old one and rewritten twice.
        try db.run("UPDATE files SET hash = (SELECT new FROM temp.content_of WHERE old = files.hash) WHERE hash IN (SELECT old FROM temp.content_of)")
    }

    /// Cuts a big blob into blocks: one pass over the file, each non-zero block written
    /// to a staging file and adopted (fsynced, renamed, folder synced) unless the store
    /// has it, then recorded. Returns nil when the blob file is missing, short or does
    /// not hash to its name (its row goes; files that named it stay undownloadable).
    private static func split(_ digest: SHA256Digest, size: Int64, store: BlobStore, db: Database, created: Int64) throws -> BlockManifest? {
        guard let fd = try? store.open(digest) else { return nil }
        defer { FileIO.close(fd) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Blocks.size, alignment: 4096)
        defer { buffer.deallocate() }
        let whole = SHA256Hasher()
        var blocks: [SHA256Digest] = []
        var offset: Int64 = 0
        while offset < size {
            let length = Int(min(Int64(Blocks.size), size - offset))
            var filled = 0
            while filled < length {
                let n = try FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<length]), at: offset + Int64(filled))
                if n == 0 { return nil }
                filled += n
            }
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<length])
            whole.update(bytes)
            let blockHasher = SHA256Hasher()
            blockHasher.update(bytes)
            let block = blockHasher.finish()
            blocks.append(block)
            if !Blocks.isZero(block, length: length) {
                if !store.contains(block) {
                    let staging = try store.makeStagingFile()
                    let written = Result { try FileIO.pwrite(staging.fd, bytes, at: 0) }
                    FileIO.close(staging.fd)
                    do {
                        try written.get()
                        try store.adopt(stagingPath: staging.path, as: block, durable: true)
                    } catch {
                        _ = unlink(staging.path)
                        throw error
                    }
                }
                try db.run("INSERT OR IGNORE INTO blocks(hash, size, created_at) VALUES (?, ?, ?)", block.hex, Int64(length), created)
            }
            offset += Int64(length)
        }
        guard whole.finish() == digest else { return nil }
        return BlockManifest(content: ContentHash.of(blocks: blocks), size: size, blocks: blocks)
    }

    /// Removes the files of blobs the migration replaced, once its transaction has
    /// committed (run at every start, so a kill before it finishes only delays it).
    static func removeObsolete(_ metadata: Metadata, store: BlobStore) throws {
        let hashes = try metadata.withSession { db in
            try db.query("SELECT hash FROM obsolete_blobs WHERE hash NOT IN (SELECT hash FROM blocks)") { $0.string(0) ?? "" }
        }
        for hex in hashes {
            if let digest = SHA256Digest(hex: hex) { store.remove(digest) }
            try metadata.withSession { try $0.run("DELETE FROM obsolete_blobs WHERE hash = ?", hex) }
        }
    }
}
