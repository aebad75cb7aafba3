import Storage

/// The mirror's tables, in the catalog database (so that the journal's rows commit with
/// the drive's changes, and an applied remote change with its catalog rows).
///
/// - `mirror_nodes`: the *synced* tree, the merge base: one row per node this device and
///   the server agreed on, with the local inode that holds it. `version` 0: a node made
///   here whose create has not been acknowledged yet (its id is chosen and kept, so a
///   create sent again after a kill is the same create).
/// - `mirror_dirty`: inodes the kernel changed since they were last agreed on (the
///   change journal's rows); `seq` grows with every change, so a change made while an
///   older state was being sent keeps the inode dirty.
/// - `mirror_remote`: the *remote* tree's news: nodes the feed brought that are not
///   applied here yet.
/// - `mirror_state`: the feed's cursor and the workspace it came from.
public enum MirrorSchema {
    public static let migrations: [Migration] = [
        Migration("mirror-1-trees", """
        CREATE TABLE mirror_nodes (
            ino INTEGER PRIMARY KEY,
            node TEXT NOT NULL UNIQUE,
            parent TEXT NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            hash TEXT,
            size INTEGER NOT NULL DEFAULT 0,
            mtime INTEGER NOT NULL DEFAULT 0,
            executable INTEGER NOT NULL DEFAULT 0,
            target TEXT,
            version INTEGER NOT NULL
        );
        CREATE TABLE mirror_dirty (ino INTEGER PRIMARY KEY, seq INTEGER NOT NULL, changed_ns INTEGER NOT NULL, since_ns INTEGER NOT NULL);
        CREATE TABLE mirror_remote (
            node TEXT PRIMARY KEY,
            version INTEGER NOT NULL,
            parent TEXT NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            hash TEXT,
            size INTEGER NOT NULL DEFAULT 0,
            mtime INTEGER NOT NULL DEFAULT 0,
            executable INTEGER NOT NULL DEFAULT 0,
            target TEXT,
            deleted INTEGER NOT NULL DEFAULT 0,
            device TEXT
        );
        CREATE INDEX mirror_remote_by_version ON mirror_remote(version);
        CREATE TABLE mirror_state (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
        """),
        // The block list the feed brings with a small file, space-separated hex.
        Migration("mirror-2-remote-blocks", "ALTER TABLE mirror_remote ADD COLUMN blocks TEXT;"),
        // A node by its place: each new file asks whether it takes over a name an editor's
        // save replaced, and a folder's children are found by parent. Without it each was
        // a scan of every synced node, and a copy of n files cost n scans of n rows.
        Migration("mirror-3-nodes-by-place", "CREATE INDEX mirror_nodes_by_place ON mirror_nodes(parent, name);"),
    ]
}

/// A row of the synced tree: the node as last agreed, and the inode holding it here.
public struct SyncedNode: Sendable, Equatable {
    public var ino: UInt64
    public var node: RemoteNode
}

/// The mirror's SQL, on whichever connection the caller holds (its own, or the
/// catalog's inside `applyExternal`).
enum MirrorRows {
    static let nodeColumns = "node, parent, name, kind, hash, size, mtime, executable, target, version"

    static func node(_ r: Row, from c: Int32) -> RemoteNode {
        RemoteNode(id: r.string(c) ?? "", parent: r.string(c + 1) ?? "", name: r.string(c + 2) ?? "",
                   kind: RemoteNode.Kind(rawValue: r.string(c + 3) ?? "") ?? .file, hash: r.string(c + 4), size: r.int64(c + 5),
                   mtime: r.int64(c + 6), executable: r.int64(c + 7) != 0, target: r.string(c + 8), version: r.int64(c + 9))
    }

    static func synced(ino: UInt64, in db: Database) throws -> SyncedNode? {
        try db.queryOne("SELECT ino, \(nodeColumns) FROM mirror_nodes WHERE ino = ?", ino) {
            SyncedNode(ino: UInt64($0.int64(0)), node: node($0, from: 1))
        }
    }

    static func synced(node id: String, in db: Database) throws -> SyncedNode? {
        try db.queryOne("SELECT ino, \(nodeColumns) FROM mirror_nodes WHERE node = ?", id) {
            SyncedNode(ino: UInt64($0.int64(0)), node: node($0, from: 1))
        }
    }

    static func save(_ s: SyncedNode, in db: Database) throws {
        let n = s.node
        try db.run("DELETE FROM mirror_nodes WHERE node = ? AND ino != ?", n.id, s.ino)
        try db.run("""
            INSERT INTO mirror_nodes(ino, \(nodeColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(ino) DO UPDATE SET node = excluded.node, parent = excluded.parent, name = excluded.name, kind = excluded.kind,
                hash = excluded.hash, size = excluded.size, mtime = excluded.mtime, executable = excluded.executable,
                target = excluded.target, version = excluded.version
            """, s.ino, n.id, n.parent, n.name, n.kind.rawValue, n.hash, n.size, n.mtime, n.executable ? 1 : 0, n.target, n.version)
    }

    static func forget(ino: UInt64, in db: Database) throws {
        try db.run("DELETE FROM mirror_nodes WHERE ino = ?", ino)
    }

    static func markDirty(_ ino: UInt64, now: Int64, in db: Database) throws {
        try db.run("""
            INSERT INTO mirror_dirty(ino, seq, changed_ns, since_ns) VALUES (?, 1, ?, ?)
            ON CONFLICT(ino) DO UPDATE SET seq = seq + 1, changed_ns = excluded.changed_ns
            """, ino, now, now)
    }

    /// Marks everything under `folder` not synced yet and not marked already: a folder
    /// that enters the workspace whole (moved out of the Camera Roll, renamed from a
    /// temporary or excluded name) brings contents whose own changes were never sent.
    static func markUnsentBelow(_ folder: UInt64, now: Int64, in db: Database) throws {
        try db.run("""
            WITH RECURSIVE below(ino) AS (
                SELECT ino FROM entries WHERE parent = ?
                UNION SELECT e.ino FROM entries e JOIN below b ON e.parent = b.ino)
            INSERT INTO mirror_dirty(ino, seq, changed_ns, since_ns)
            SELECT ino, 1, ?, ? FROM below WHERE NOT EXISTS (SELECT 1 FROM mirror_nodes m WHERE m.ino = below.ino)
            ON CONFLICT(ino) DO NOTHING
            """, folder, now, now)
    }

    /// Clears the mark if nothing changed since `seq` was read; else the inode stays dirty
    /// and its wait for the next send starts now (at most about one send a second).
    static func clearDirty(_ ino: UInt64, seq: Int64, now: Int64, in db: Database) throws {
        if try db.run("DELETE FROM mirror_dirty WHERE ino = ? AND seq = ?", ino, seq) == 0 {
            try db.run("UPDATE mirror_dirty SET since_ns = ? WHERE ino = ?", now, ino)
        }
    }

    struct Dirty { var ino: UInt64; var seq: Int64; var changed: Int64; var since: Int64 }

    static func dirty(limit: Int, in db: Database) throws -> [Dirty] {
        try db.query("SELECT ino, seq, changed_ns, since_ns FROM mirror_dirty ORDER BY ino LIMIT ?", limit) {
            Dirty(ino: UInt64($0.int64(0)), seq: $0.int64(1), changed: $0.int64(2), since: $0.int64(3))
        }
    }

    /// Dirty inodes the mirror has no row of: new here, not planned yet.
    static func dirtyUnknown(in db: Database) throws -> Set<UInt64> {
        Set(try db.query("SELECT d.ino FROM mirror_dirty d WHERE NOT EXISTS (SELECT 1 FROM mirror_nodes n WHERE n.ino = d.ino)") {
            UInt64($0.int64(0))
        })
    }

    static func isDirty(_ ino: UInt64, in db: Database) throws -> Bool {
        try db.queryOne("SELECT 1 FROM mirror_dirty WHERE ino = ?", ino) { _ in true } ?? false
    }

    static let remoteColumns = "node, parent, name, kind, hash, size, mtime, executable, target, version, deleted, device, blocks"

    static func saveRemote(_ n: RemoteNode, in db: Database) throws {
        try db.run("""
            INSERT INTO mirror_remote(\(remoteColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(node) DO UPDATE SET parent = excluded.parent, name = excluded.name, kind = excluded.kind, hash = excluded.hash,
                size = excluded.size, mtime = excluded.mtime, executable = excluded.executable, target = excluded.target,
                version = excluded.version, deleted = excluded.deleted, device = excluded.device, blocks = excluded.blocks
            WHERE excluded.version >= mirror_remote.version
            """, n.id, n.parent, n.name, n.kind.rawValue, n.hash, n.size, n.mtime, n.executable ? 1 : 0, n.target, n.version,
                   n.deleted ? 1 : 0, n.device, n.blocks?.joined(separator: " "))
    }

    static func remote(limit: Int, in db: Database) throws -> [RemoteNode] {
        try db.query("SELECT \(remoteColumns) FROM mirror_remote ORDER BY version LIMIT ?", limit) { r in
            var n = node(r, from: 0)
            n.deleted = r.int64(10) != 0
            n.device = r.string(11)
            n.blocks = r.string(12).map { $0.isEmpty ? [] : $0.split(separator: " ").map(String.init) }
            return n
        }
    }

    static func dropRemote(_ id: String, upTo version: Int64, in db: Database) throws {
        try db.run("DELETE FROM mirror_remote WHERE node = ? AND version <= ?", id, version)
    }

    static func state(_ key: String, in db: Database) throws -> String? {
        try db.queryOne("SELECT value FROM mirror_state WHERE key = ?", key) { $0.string(0) } ?? nil
    }

    static func setState(_ key: String, _ value: String, in db: Database) throws {
        try db.run("INSERT INTO mirror_state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
    }
}

extension SyncedNode {
    /// The synced row of an inode, on any connection to the catalog (a command beside a
    /// running mount reads it on a read-only one), and whether a change of the inode
    /// waits to go up; nil when the node is not in the synced tree.
    public static func stored(ino: UInt64, in db: Database) throws -> (synced: SyncedNode, changedHere: Bool)? {
        guard let synced = try MirrorRows.synced(ino: ino, in: db) else { return nil }
        return (synced, try MirrorRows.isDirty(ino, in: db))
    }
}
