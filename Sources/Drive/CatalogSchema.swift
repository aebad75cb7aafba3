import Storage

/// The catalog's schema. A migration that has shipped is never edited.
///
/// - `inodes`: one row per file, folder or symlink; `ino` is the FUSE inode number.
///   `blob` names the content (SHA-256 hex) of a non-empty regular file.
/// - `entries`: the names. `id` orders a folder's listing and is the readdir offset,
///   so a listing stays stable while entries are added or removed.
/// - `blobs`: one row per stored blob; `refs` is kept by triggers on `inodes`
///   (and on other tables that pin blobs, such as the backup queue), so a
///   reference count can never drift from the rows that hold it. `gen` is the
///   commit generation that stored the blob (see Durability.swift).
/// - `camera_changes`: every commit in `Camera Roll`, numbered by a monotonic
///   change sequence: the backup engine's input.
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
    ]
}
