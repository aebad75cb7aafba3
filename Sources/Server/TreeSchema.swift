import Protocol
import Storage

/// `server-007-tree`: the workspace tree (Docs/sync.md, "The server's tree").
///
/// `tree_nodes`: one row per node, live, in the trash (`deleted_at` set) or purged (a
/// tombstone: `purged_at` set, no content). `version` is the node's last change in the
/// tree's own series; unique, so two changes never share one and the feed reads it in
/// order from its index. The partial unique index on (parent, name) over live nodes is
/// the "two live nodes never share a name in a folder" invariant, kept by the database
/// itself (both SQLite and PostgreSQL have partial indexes); the server looks first and
/// answers `name_taken`, and the index settles two processes that looked at once. The
/// root is a row of its own (its own parent, version 0: never in the feed), so every
/// parent lookup is one row.
///
/// `tree_versions`: every content a file node has had (node, the version that gave it
/// the content), kept while the node is live or in the trash; indexed by hash for the
/// garbage collection's "is this content named" (`BlockNames.contentNamed`).
enum TreeSchema {
    static let sqlite = Migration("server-007-tree", """
    CREATE TABLE tree_nodes (
        id TEXT PRIMARY KEY,
        parent TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        hash TEXT,
        size INTEGER,
        mtime INTEGER NOT NULL,
        executable INTEGER,
        target TEXT,
        version INTEGER NOT NULL UNIQUE,
        device_id INTEGER NOT NULL,
        changed_at INTEGER NOT NULL,
        deleted_at INTEGER,
        deleted_by INTEGER,
        deleted_path TEXT,
        purged_at INTEGER
    ) WITHOUT ROWID;
    \(indexes)
    CREATE TABLE tree_versions (
        node TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime INTEGER NOT NULL,
        device_id INTEGER NOT NULL,
        recorded_at INTEGER NOT NULL,
        PRIMARY KEY (node, sequence)
    ) WITHOUT ROWID;
    CREATE INDEX tree_versions_by_hash ON tree_versions(hash);
    \(root)
    """)

    static let postgres = """
    CREATE TABLE tree_nodes (
        id TEXT COLLATE "C" PRIMARY KEY,
        parent TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        kind TEXT NOT NULL,
        hash TEXT COLLATE "C",
        size BIGINT,
        mtime BIGINT NOT NULL,
        executable BIGINT,
        target TEXT,
        version BIGINT NOT NULL UNIQUE,
        device_id BIGINT NOT NULL,
        changed_at BIGINT NOT NULL,
        deleted_at BIGINT,
        deleted_by BIGINT,
        deleted_path TEXT,
        purged_at BIGINT
    );
    \(indexes)
    CREATE TABLE tree_versions (
        node TEXT COLLATE "C" NOT NULL,
        sequence BIGINT NOT NULL,
        hash TEXT COLLATE "C" NOT NULL,
        size BIGINT NOT NULL,
        mtime BIGINT NOT NULL,
        device_id BIGINT NOT NULL,
        recorded_at BIGINT NOT NULL,
        PRIMARY KEY (node, sequence)
    );
    CREATE INDEX tree_versions_by_hash ON tree_versions(hash);
    \(root)
    """

    /// The same in both: live names unique per folder; children by parent (a folder's
    /// descendants for a restore); the trash by deletion, newest first and oldest first
    /// (the purge), over unpurged deleted rows only.
    private static let indexes = """
    CREATE UNIQUE INDEX tree_nodes_live_name ON tree_nodes(parent, name) WHERE deleted_at IS NULL;
    CREATE INDEX tree_nodes_by_parent ON tree_nodes(parent);
    CREATE INDEX tree_nodes_trash ON tree_nodes(version) WHERE deleted_at IS NOT NULL AND purged_at IS NULL;
    CREATE INDEX tree_nodes_trash_age ON tree_nodes(deleted_at) WHERE deleted_at IS NOT NULL AND purged_at IS NULL;
    """

    private static let root = """
    INSERT INTO tree_nodes(id, parent, name, kind, mtime, version, device_id, changed_at)
        VALUES ('\(TreeNode.rootID)', '\(TreeNode.rootID)', '', 'folder', 0, 0, 0, 0);
    """
}
