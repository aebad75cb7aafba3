import Crypto
import Protocol
import Storage

/// The workspace tree's record operations: a node read, its chain of ancestors, and a
/// put or a delete applied with every rule of Docs/sync.md ("The server's tree").
///
/// Each change is one transaction (the caller's `withSession { db.transaction { … } }`)
/// that reads everything it decides on first and writes only once every check passed,
/// so a refusal writes nothing. SQLite's single writer orders them; on PostgreSQL they
/// are SERIALIZABLE, so two devices moving folder A into B and B into A at once cannot
/// both pass the cycle check (each read the other's row: one is aborted, runs again and
/// sees the other's move), and two creating the same name in one folder are settled by
/// the partial unique index (the second runs again and answers `name_taken`).
///
/// Versions: `MAX(version) + 1` inside the transaction, as the change feed's sequences
/// are, so they are handed out in commit order and a reader following `since=N` never
/// misses one. No row is ever deleted (a purged node stays as a tombstone), so the
/// maximum never goes back.
enum TreeNodes {
    /// A node's row: the wire node, and what only the server keeps.
    struct Stored: Equatable {
        var node: TreeNode
        /// Purged from the trash: a tombstone, without content or versions.
        var purged: Bool
        /// Its path when it was deleted (trash listings).
        var deletedPath: String?
        var isLive: Bool { !node.deleted }
    }

    static let columns = """
        n.id, n.parent, n.name, n.kind, n.hash, n.size, n.mtime, n.executable, n.target, n.version, n.deleted_at, db.name, d.name, n.changed_at, \
        n.purged_at, n.deleted_path
        """
    static let from = "tree_nodes n LEFT JOIN devices d ON d.id = n.device_id LEFT JOIN devices db ON db.id = n.deleted_by"

    static func stored(_ row: any RecordRow) -> Stored {
        let deletedAt = row.optionalInt64(10)
        let node = TreeNode(id: row.string(0) ?? "", parent: row.string(1) ?? "", name: row.string(2) ?? "",
                            kind: TreeNodeKind(rawValue: row.string(3) ?? "") ?? .file, hash: row.string(4), size: row.optionalInt64(5),
                            mtime: row.int64(6), executable: row.optionalInt64(7).map { $0 != 0 }, target: row.string(8), version: row.int64(9),
                            deleted: deletedAt != nil, deletedAt: deletedAt, deletedBy: deletedAt == nil ? nil : row.string(11),
                            device: row.string(12) ?? "", changedAt: row.int64(13))
        return Stored(node: node, purged: !row.isNull(14), deletedPath: row.string(15))
    }

    static func find(_ id: String, in db: any RecordSession) throws -> Stored? {
        try db.queryOne("SELECT \(columns) FROM \(from) WHERE n.id = ?", id, row: stored)
    }

    /// The live node named `name` in folder `parent`, if any.
    static func live(parent: String, name: String, in db: any RecordSession) throws -> Stored? {
        try db.queryOne("SELECT \(columns) FROM \(from) WHERE n.parent = ? AND n.name = ? AND n.deleted_at IS NULL", parent, name, row: stored)
    }

    /// The highest version handed out (0 before the first change).
    static func latest(in db: any RecordSession) throws -> Int64 {
        try db.queryOne("SELECT COALESCE(MAX(version), 0) FROM tree_nodes") { $0.int64(0) } ?? 0
    }

    /// What one transaction of changes has read and may reuse while it lasts (a batch of
    /// `POST /v1/tree/changes` puts hundreds of files into a few folders): the chains of
    /// the parents it walked, which no change of a file alters and which any change of a
    /// folder drops, and the highest version, which nothing but this transaction raises
    /// meanwhile (SQLite's one writer; on PostgreSQL the transaction's snapshot, which
    /// SERIALIZABLE keeps). Made inside the transaction: a run again starts empty.
    struct Batch {
        fileprivate var chains: [String: [Stored]] = [:]
        fileprivate var latest: Int64?

        init() {}

        /// The version the next write takes.
        fileprivate mutating func nextVersion(in db: any RecordSession) throws -> Int64 {
            let next = try (latest ?? TreeNodes.latest(in: db)) + 1
            latest = next
            return next
        }

        fileprivate mutating func chain(from id: String, in db: any RecordSession) throws -> [Stored] {
            if let known = chains[id] { return known }
            let chain = try TreeNodes.chain(from: id, in: db)
            chains[id] = chain
            return chain
        }
    }

    /// A guard against a parent loop in damaged records: no real tree is this deep
    /// (a path of 4,096 bytes has at most 2,048 components).
    static let maxDepth = 100_000

    /// `id` and its ancestors, nearest first, up to but without the root (empty for the
    /// root). A chain that ends at an unknown id ends there.
    static func chain(from id: String, in db: any RecordSession) throws -> [Stored] {
        try db.query("""
            WITH RECURSIVE up(id, parent, depth) AS (
                SELECT id, parent, 0 FROM tree_nodes WHERE id = ?
                UNION ALL
                SELECT t.id, t.parent, up.depth + 1 FROM tree_nodes t JOIN up ON t.id = up.parent WHERE up.id <> up.parent AND up.depth < \(maxDepth))
            SELECT \(columns) FROM \(from) JOIN up ON up.id = n.id WHERE up.id <> up.parent ORDER BY up.depth
            """, id, row: stored)
    }

    /// The path of `id` from the root (names joined by `/`).
    static func path(of id: String, in db: any RecordSession) throws -> String {
        try chain(from: id, in: db).reversed().map(\.node.name).joined(separator: "/")
    }

    /// What a put is checked against besides the tree: its content (files only).
    struct Content {
        let hash: String
        let size: Int64
        /// The block list the device sent, checked, when it sent one.
        let manifest: BlockManifest?
        /// The blocks of `manifest` the workspace lacked when the change arrived.
        let absent: [String]
    }

    /// Applies a put (validated by `Validation.treeChange`) inside the caller's
    /// transaction. Returns its result, and whether it wrote (false for a refusal and
    /// for a change already so).
    static func put(_ put: TreePut, content: Content?, device: Metadata.Device, now: Int64, in db: any RecordSession,
                    batch: inout Batch) throws -> (result: TreeResult, changed: Bool) {
        let current = try find(put.id, in: db)
        if let current {
            if current.node.kind != put.kind {
                return (refusal(TreeResult.kindConflict, "node \(put.id) is a \(current.node.kind.rawValue); a node's kind never changes (give the \(put.kind.rawValue) a new id)", node: current.node), false)
            }
            if current.isLive && same(current.node, put) { return (TreeResult(status: 200, node: current.node), false) }
            if current.node.version != put.base {
                return (refusal(TreeResult.conflict, "node \(put.id) is at version \(current.node.version), not \(put.base): someone changed it since; read the tree from your last version, then decide again", node: current.node), false)
            }
        } else if put.base != 0 {
            return (refusal(TreeResult.conflict, "no node has id \(put.id) (the server may have been reset: compare the tree's workspace id); create it with base 0"), false)
        }

        // The parent and its ancestors (empty for the root): a folder in the tree, whose
        // ancestors in the trash (up to the first live one) come back with the node.
        var parentChain: [Stored] = []
        if put.parent != TreeNode.rootID {
            parentChain = try batch.chain(from: put.parent, in: db)
            guard let parent = parentChain.first else {
                return (refusal(TreeResult.parentMissing, "no folder has id \(put.parent); put the parent first", field: "parent"), false)
            }
            guard parent.node.kind == .folder else {
                return (refusal(TreeResult.parentMissing, "the parent \(put.parent) is a \(parent.node.kind.rawValue), not a folder", field: "parent"), false)
            }
            guard parentChain.last?.node.parent == TreeNode.rootID else {
                return (refusal(TreeResult.parentMissing, "the parent \(put.parent) is not in the tree (its chain of folders ends at an unknown one)", field: "parent"), false)
            }
        }
        let trashed = parentChain.prefix { !$0.isLive }
        if let gone = trashed.first(where: \.purged) {
            return (refusal(TreeResult.parentMissing, "folder \(gone.node.id) ('\(gone.node.name)') above the parent was purged from the trash; put the node into another folder", field: "parent"), false)
        }
        if put.kind == .folder, current != nil, parentChain.contains(where: { $0.node.id == put.id }) {
            return (refusal(TreeResult.cycle, "moving folder \(put.id) into \(put.parent) would put it inside itself; someone may have moved the folders meanwhile: read the tree again", node: current?.node), false)
        }
        if let other = try live(parent: put.parent, name: put.name, in: db), other.node.id != put.id {
            return (refusal(TreeResult.nameTaken, "'\(put.name)' is taken in that folder by node \(other.node.id); choose another name (or merge with it)", node: other.node, field: "name"), false)
        }
        if let content, let refusal = try check(content, in: db) { return (refusal, false) }

        // Every check passed: write. A folder's change changes chains (and so does a bring-back).
        if put.kind == .folder { batch.chains = [:] }
        for ancestor in trashed.reversed() { _ = try bringBack(ancestor, device: device, now: now, in: db, batch: &batch) }
        let version = try batch.nextVersion(in: db)
        if current != nil {
            try db.run("""
                UPDATE tree_nodes SET parent = ?, name = ?, hash = ?, size = ?, mtime = ?, executable = ?, target = ?, version = ?, device_id = ?, changed_at = ?,
                    deleted_at = NULL, deleted_by = NULL, deleted_path = NULL, purged_at = NULL
                WHERE id = ?
                """, put.parent, put.name, put.hash, put.size, put.mtime, put.executable, put.target, version, device.id, now, put.id)
        } else {
            try db.run("""
                INSERT INTO tree_nodes(id, parent, name, kind, hash, size, mtime, executable, target, version, device_id, changed_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, put.id, put.parent, put.name, put.kind.rawValue, put.hash, put.size, put.mtime, put.executable, put.target, version, device.id, now)
        }
        if let content, current == nil || current?.purged == true || current?.node.hash != content.hash {
            try db.run("INSERT INTO tree_versions(node, sequence, hash, size, mtime, device_id, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       put.id, version, content.hash, content.size, put.mtime, device.id, now)
        }
        // The row as written, without reading it back: a put's node is live, by this device, now.
        let node = TreeNode(id: put.id, parent: put.parent, name: put.name, kind: put.kind, hash: put.hash, size: put.size, mtime: put.mtime,
                            executable: put.executable, target: put.target, version: version, device: device.name, changedAt: now)
        return (TreeResult(status: current == nil ? 201 : 200, node: node), true)
    }

    /// Moves a node to the trash inside the caller's transaction.
    static func delete(id: String, base: Int64, device: Metadata.Device, now: Int64, in db: any RecordSession,
                       batch: inout Batch) throws -> (result: TreeResult, changed: Bool) {
        guard let current = try find(id, in: db) else {
            return (refusal(TreeResult.conflict, "no node has id \(id) (the server may have been reset: compare the tree's workspace id)"), false)
        }
        if !current.isLive { return (TreeResult(status: 200, node: current.node), false) }
        if current.node.version != base {
            return (refusal(TreeResult.conflict, "node \(id) is at version \(current.node.version), not \(base): someone changed it since; read the tree from your last version, then decide again", node: current.node), false)
        }
        if current.node.kind == .folder,
           try db.queryOne("SELECT 1 FROM tree_nodes WHERE parent = ? AND deleted_at IS NULL LIMIT 1", id, row: { _ in true }) != nil {
            return (refusal(TreeResult.notEmpty, "folder \(id) still has live children (one may have been added elsewhere); delete them first, or keep the folder", node: current.node), false)
        }
        let path = try path(of: id, in: db)
        if current.node.kind == .folder { batch.chains = [:] }
        let version = try batch.nextVersion(in: db)
        try db.run("""
            UPDATE tree_nodes SET deleted_at = ?, deleted_by = ?, deleted_path = ?, version = ?, device_id = ?, changed_at = ? WHERE id = ?
            """, now, device.id, path, version, device.id, now, id)
        guard let node = try find(id, in: db)?.node else { throw TreeRecordsDamaged(id: id) }
        return (TreeResult(status: 200, node: node), true)
    }

    /// Brings a node in the trash back into its parent (which is live by now), under a
    /// new version; named `name (restored)` (then `(restored 2)`, …) when its name is taken.
    static func bringBack(_ stored: Stored, device: Metadata.Device, now: Int64, in db: any RecordSession, batch: inout Batch) throws -> TreeNode {
        var name = stored.node.name
        var attempt = 1
        while try live(parent: stored.node.parent, name: name, in: db) != nil {
            name = TreeNames.restored(stored.node.name, kind: stored.node.kind, attempt: attempt)
            attempt += 1
        }
        batch.chains = [:]
        let version = try batch.nextVersion(in: db)
        try db.run("""
            UPDATE tree_nodes SET name = ?, version = ?, device_id = ?, changed_at = ?, deleted_at = NULL, deleted_by = NULL, deleted_path = NULL WHERE id = ?
            """, name, version, device.id, now, stored.node.id)
        guard let node = try find(stored.node.id, in: db)?.node else { throw TreeRecordsDamaged(id: stored.node.id) }
        return node
    }

    /// Every content file node `id` has had, oldest first; nil when no node has that id.
    static func versions(of id: String, in db: any RecordSession) throws -> [TreeVersion]? {
        guard try find(id, in: db) != nil else { return nil }
        return try db.query("""
            SELECT v.sequence, v.hash, v.size, v.mtime, d.name, v.recorded_at FROM tree_versions v LEFT JOIN devices d ON d.id = v.device_id
            WHERE v.node = ? ORDER BY v.sequence
            """, id) {
            TreeVersion(sequence: $0.int64(0), hash: $0.string(1) ?? "", size: $0.int64(2), mtime: $0.int64(3), device: $0.string(4) ?? "", recordedAt: $0.int64(5))
        }
    }

    /// Whether the node already has the state the put gives it (a put sent again).
    private static func same(_ node: TreeNode, _ put: TreePut) -> Bool {
        node.parent == put.parent && node.name == put.name && node.hash == put.hash && node.size == put.size && node.mtime == put.mtime
            && node.executable == put.executable && node.target == put.target
    }

    /// The content check of `POST /v1/files`, inside the transaction: a known content of
    /// another size is `size_conflict`; an unknown one needs its block list
    /// (`content_missing`) and every non-zero block stored (`missing_blocks`), and is then
    /// recorded here, with the node or not at all. Nil when the content is fine.
    private static func check(_ content: Content, in db: any RecordSession) throws -> TreeResult? {
        if let size = try db.queryOne("SELECT size FROM contents WHERE hash = ?", content.hash, row: { $0.int64(0) }) {
            guard size == content.size else {
                return refusal("size_conflict", "size \(content.size) does not match the workspace's content \(content.hash) of \(size) bytes; check the size you send", field: "size")
            }
            return nil
        }
        guard let manifest = content.manifest else {
            return refusal("content_missing", "the workspace has no content \(content.hash); send its block list ('blocks') with the put, after uploading the blocks (POST /v1/uploads)", field: "blocks")
        }
        let missing = content.absent.isEmpty ? try ServerContext.blocksMissing(manifest, in: db) : content.absent
        if !missing.isEmpty {
            var result = refusal("missing_blocks", "the workspace lacks \(missing.count) block(s) of this content; upload them (POST /v1/uploads lists them with URLs), then put the node again", field: "blocks")
            result.missing = missing
            return result
        }
        try ServerContext.insertCheckedContent(manifest, in: db)
        return nil
    }

    static func refusal(_ code: String, _ message: String, node: TreeNode? = nil, field: String? = nil) -> TreeResult {
        TreeResult(status: 409, node: node, error: code, message: message, field: field)
    }
}

/// A node row that was just written is not there: the records are damaged (a 500).
struct TreeRecordsDamaged: Error, CustomStringConvertible {
    let id: String
    var description: String { "tree node \(id) is missing right after it was written" }
}
