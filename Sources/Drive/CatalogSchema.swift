import Storage

/// The catalog's schema. A migration that has shipped is never edited.
///
/// Current tables (after drive-002):
/// - `inodes`: one row per file, folder or symlink; `ino` is the FUSE inode number.
///   `content` is a regular file's content hash (Crypto's `ContentHash`); `stored` the
///   bytes its stored blocks hold (holes excluded): `st_blocks`, so `du` tells the truth.
/// - `file_blocks`: a regular file's stored blocks, `(ino, idx) → hash`. A block index
///   with no row is a hole (zeros): holes cost no row, no file and no disk.
/// - `blocks`: one row per stored block; `refs` counts the `file_blocks` rows and
///   backup pins naming it, kept by triggers; `gen` is the commit generation that
///   stored it (see Durability.swift); `damaged` marks one found wrong after a power cut.
///
/// drive-001 (shipped) stored one blob per file (`inodes.blob`, `blobs`); drive-002
/// moves every blob into blocks (see BlockMigration.swift).
/// - `entries`: the names. `id` orders a folder's listing and is the readdir offset,
///   so a listing stays stable while entries are added or removed.
/// - `blobs`: one row per stored blob; `refs` is kept by triggers on `inodes`
///   (and on other tables that pin blobs, such as the backup queue), so a
///   reference count can never drift from the rows that hold it. `gen` is the
///   commit generation that stored the blob (see Durability.swift).
/// - `numbered_changes` (`camera_changes` until drive-006): every change a follower asked
///   a number for (`DriveChange.sequence`: the backup numbers each photo version it
///   queues), by a sequence that only grows over the catalog's life.
enum CatalogSchema {
    static let migrations: [Migration] = [
        Migration("drive-001-catalog", """
        CREATE TABLE inodes (
            ino INTEGER PRIMARY KEY,
            mode INTEGER NOT NULL,
            uid INTEGER NOT NULL,
            gid INTEGER NOT NULL,
            size INTEGER NOT NULL DEFAULT 0,
            nlink INTEGER NOT NULL,
            atime_ns INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            ctime_ns INTEGER NOT NULL,
            rdev INTEGER NOT NULL DEFAULT 0,
            blob TEXT,
            target BLOB
        );
        CREATE INDEX inodes_by_blob ON inodes(blob) WHERE blob IS NOT NULL;
        CREATE INDEX inodes_orphaned ON inodes(nlink) WHERE nlink = 0;
        CREATE TABLE entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            parent INTEGER NOT NULL,
            name BLOB NOT NULL,
            ino INTEGER NOT NULL,
            UNIQUE (parent, name)
        );
        CREATE INDEX entries_by_ino ON entries(ino);
        CREATE INDEX entries_by_parent_id ON entries(parent, id);
        CREATE TABLE xattrs (
            ino INTEGER NOT NULL,
            name TEXT NOT NULL,
            value BLOB NOT NULL,
            PRIMARY KEY (ino, name)
        ) WITHOUT ROWID;
        CREATE TABLE blobs (
            hash TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            refs INTEGER NOT NULL DEFAULT 0,
            gen INTEGER NOT NULL,
            damaged INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE INDEX blobs_unreferenced ON blobs(refs) WHERE refs <= 0;
        CREATE INDEX blobs_by_gen ON blobs(gen);
        CREATE TABLE camera_changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            ino INTEGER NOT NULL,
            path TEXT NOT NULL,
            hash TEXT,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            committed_ns INTEGER NOT NULL
        );
        CREATE TABLE drive_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        CREATE TRIGGER inodes_blob_insert AFTER INSERT ON inodes WHEN NEW.blob IS NOT NULL
        BEGIN UPDATE blobs SET refs = refs + 1 WHERE hash = NEW.blob; END;
        CREATE TRIGGER inodes_blob_update AFTER UPDATE OF blob ON inodes WHEN OLD.blob IS NOT NEW.blob
        BEGIN
            UPDATE blobs SET refs = refs - 1 WHERE hash = OLD.blob;
            UPDATE blobs SET refs = refs + 1 WHERE hash = NEW.blob;
        END;
        CREATE TRIGGER inodes_blob_delete AFTER DELETE ON inodes WHEN OLD.blob IS NOT NULL
        BEGIN UPDATE blobs SET refs = refs - 1 WHERE hash = OLD.blob; END;
        CREATE TRIGGER inodes_delete_xattrs AFTER DELETE ON inodes
        BEGIN DELETE FROM xattrs WHERE ino = OLD.ino; END;
        """),
        Migration("drive-002-blocks", """
        CREATE TABLE blocks (
            hash TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            refs INTEGER NOT NULL DEFAULT 0,
            gen INTEGER NOT NULL,
            damaged INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE INDEX blocks_unreferenced ON blocks(refs) WHERE refs <= 0;
        CREATE INDEX blocks_by_gen ON blocks(gen);
        CREATE TABLE file_blocks (
            ino INTEGER NOT NULL,
            idx INTEGER NOT NULL,
            hash TEXT NOT NULL,
            PRIMARY KEY (ino, idx)
        ) WITHOUT ROWID;
        CREATE INDEX file_blocks_by_hash ON file_blocks(hash);
        CREATE TRIGGER file_blocks_insert AFTER INSERT ON file_blocks
        BEGIN UPDATE blocks SET refs = refs + 1 WHERE hash = NEW.hash; END;
        CREATE TRIGGER file_blocks_update AFTER UPDATE OF hash ON file_blocks WHEN OLD.hash IS NOT NEW.hash
        BEGIN
            UPDATE blocks SET refs = refs - 1 WHERE hash = OLD.hash;
            UPDATE blocks SET refs = refs + 1 WHERE hash = NEW.hash;
        END;
        CREATE TRIGGER file_blocks_delete AFTER DELETE ON file_blocks
        BEGIN UPDATE blocks SET refs = refs - 1 WHERE hash = OLD.hash; END;
        CREATE TRIGGER inodes_delete_blocks AFTER DELETE ON inodes
        BEGIN DELETE FROM file_blocks WHERE ino = OLD.ino; END;
        ALTER TABLE inodes ADD COLUMN content TEXT;
        ALTER TABLE inodes ADD COLUMN stored INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE legacy_blobs (
            hash TEXT PRIMARY KEY,
            content TEXT NOT NULL,
            blocks TEXT NOT NULL,
            split INTEGER NOT NULL
        ) WITHOUT ROWID;
        """, code: BlockMigration.run),
        // After drive-002 moved their data, the blob triggers, index and column go. The
        // emptied `blobs` table stays until the backup wiring has dropped its triggers on
        // it (wiring-2): SQLite re-checks triggers when a table they name disappears.
        Migration("drive-003-drop-blobs", """
        DROP TRIGGER IF EXISTS inodes_blob_insert;
        DROP TRIGGER IF EXISTS inodes_blob_update;
        DROP TRIGGER IF EXISTS inodes_blob_delete;
        DROP INDEX IF EXISTS inodes_by_blob;
        ALTER TABLE inodes DROP COLUMN blob;
        DELETE FROM blobs;
        """),
        // Blocks the drive does not hold (see BlockCache.swift): `resident` = 0 for a block
        // whose file was dropped (optimize storage) or never fetched; `fetched` = 1 for one
        // that came from the server (kept as cache while no file names it, evicted by
        // `used_ns`, least recently used first). `block_chunks` keeps each remote block's
        // chunk digests (fetched once); `partial_blocks` records which chunks of a block
        // being fetched piecewise are verified in its partial file (a bit per chunk).
        Migration("drive-004-residency", """
        ALTER TABLE blocks ADD COLUMN resident INTEGER NOT NULL DEFAULT 1;
        ALTER TABLE blocks ADD COLUMN fetched INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE blocks ADD COLUMN used_ns INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX blocks_cache_order ON blocks(used_ns) WHERE resident = 1;
        CREATE TABLE block_chunks (
            hash TEXT PRIMARY KEY,
            digests BLOB NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE partial_blocks (
            hash TEXT PRIMARY KEY,
            length INTEGER NOT NULL,
            chunks INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        """),
        // Small blocks kept in the catalog instead of a file each (InlineBlocks.swift):
        // a block of at most `InlineBlocks.limit` bytes, the only block of a file outside
        // the Camera Roll. Its `blocks` row is as for any block; the bytes go with it.
        Migration("drive-005-inline-blocks", """
        CREATE TABLE inline_blocks (
            hash TEXT PRIMARY KEY,
            data BLOB NOT NULL
        ) WITHOUT ROWID;
        CREATE TRIGGER blocks_delete_inline AFTER DELETE ON blocks
        BEGIN DELETE FROM inline_blocks WHERE hash = OLD.hash; END;
        """),
        // The drive no longer tells which files are in the Camera Roll: the backup asks for
        // a number for each version it queues, from the same sequence (the rename carries
        // the table's AUTOINCREMENT counter, so numbers go on from the highest given).
        Migration("drive-006-numbered-changes", """
        ALTER TABLE camera_changes RENAME TO numbered_changes;
        """),
        // The bytes of small blocks in a rowid table, found through an index of their hashes.
        // As a WITHOUT ROWID table every row was a cell of the primary key's B-tree, interior
        // pages included: about four 35 KB rows to a page, a tree seven levels deep for
        // 10,000 files, and each insert or read of a block walked and moved overflowing cells
        // (a quarter of the mount's CPU when 10,000 small files were copied in). Here the
        // index holds only hashes and the rows are appended in rowid order.
        Migration("drive-007-inline-blocks-by-rowid", """
        CREATE TABLE inline_blocks_by_rowid (
            hash TEXT NOT NULL UNIQUE,
            data BLOB NOT NULL
        );
        INSERT INTO inline_blocks_by_rowid(hash, data) SELECT hash, data FROM inline_blocks;
        DROP TRIGGER blocks_delete_inline;
        DROP TABLE inline_blocks;
        ALTER TABLE inline_blocks_by_rowid RENAME TO inline_blocks;
        CREATE TRIGGER blocks_delete_inline AFTER DELETE ON blocks
        BEGIN DELETE FROM inline_blocks WHERE hash = OLD.hash; END;
        """),
        // Small blocks' bytes leave the catalog for the pack file beside it (PackFile.swift):
        // a row says where each block is. The bytes of `inline_blocks` are moved into the
        // pack at the first open (`Catalog.Locked.moveInlineBlocksToPack`), which then
        // drops that table and its trigger.
        Migration("drive-008-packed-blocks", """
        CREATE TABLE packed_blocks (
            hash TEXT PRIMARY KEY,
            pack_offset INTEGER NOT NULL,
            length INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TRIGGER blocks_delete_packed AFTER DELETE ON blocks
        BEGIN DELETE FROM packed_blocks WHERE hash = OLD.hash; END;
        """),
        // Where a small block sits in the pack is a column of its `blocks` row (its length
        // is the block's size): a table of its own keyed by the hash put every new small
        // file's row on one more random leaf of one more B-tree, a page more in each group
        // commit on the sending device and on every receiving one, and a join on each read.
        Migration("drive-009-pack-offset-in-blocks", """
        ALTER TABLE blocks ADD COLUMN pack_offset INTEGER;
        UPDATE blocks SET pack_offset = (SELECT p.pack_offset FROM packed_blocks p WHERE p.hash = blocks.hash)
        WHERE hash IN (SELECT hash FROM packed_blocks);
        DROP TRIGGER blocks_delete_packed;
        DROP TABLE packed_blocks;
        """),
    ]
}
