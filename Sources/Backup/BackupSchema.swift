import Storage

/// The backup tables, created in the drive's catalog database next to its own tables.
/// Names start with `backup-` so they never collide with the drive's migrations.
public enum BackupSchema {
    public static let migrations: [Migration] = [
        Migration("backup-1-items", """
        CREATE TABLE backup_items (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a stale id must not hit a newer row
            change_sequence INTEGER NOT NULL UNIQUE,
            inode INTEGER NOT NULL,
            path TEXT NOT NULL,
            hash TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'uploading', 'done', 'failed')),
            linked INTEGER NOT NULL DEFAULT 0,
            recorded INTEGER NOT NULL DEFAULT 0,
            failure_reason TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            integrity_failures INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL NOT NULL DEFAULT 0,
            last_error TEXT,
            upload_url TEXT,
            url_expires_at REAL,
            bytes_sent INTEGER NOT NULL DEFAULT 0,
            capture_date TEXT,
            capture_source TEXT,
            queued_at REAL NOT NULL,
            finished_at REAL
        );
        CREATE INDEX backup_items_by_state ON backup_items(state, next_attempt_at, change_sequence);
        CREATE INDEX backup_items_by_hash ON backup_items(hash, state);
        CREATE INDEX backup_items_by_path ON backup_items(path, change_sequence);
        CREATE INDEX backup_items_by_inode ON backup_items(inode, change_sequence);
        CREATE TABLE backup_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        """),
        // Content in blocks, and versions that settle when their last writer goes. `hash` holds the
        // content hash from here on; `blocks` is its block list as a JSON array of hex
        // digests (the drive's triggers pin each block through `json_each`). Existing rows
        // get an empty list and count as settled: the drive's own migration, which runs
        // after this one, rewrites `hash` and `blocks` of the items not yet done.
        Migration("backup-2-blocks-settled", """
        ALTER TABLE backup_items ADD COLUMN blocks TEXT NOT NULL DEFAULT '[]';
        ALTER TABLE backup_items ADD COLUMN settled INTEGER NOT NULL DEFAULT 1;
        CREATE INDEX backup_items_unsettled ON backup_items(inode) WHERE settled = 0;
        """),
    ]
}
