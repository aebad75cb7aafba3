import Foundation
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// The tree's trash: deleted nodes keep their row and their versions until the purge
/// (`vdrive serve --trash-days`, run with the periodic collection) turns them into
/// tombstones, which keep kind, parent, name and version, so a device away for months
/// still learns the delete from the feed. Listing, restoring and purging are here.
enum TreeTrash {
    /// Deleted, unpurged nodes with a version below `before`, newest deletion first (a
    /// deleted node's version is its deletion's: nothing changes a node in the trash).
    static func list(before: Int64, limit: Int64, in db: any RecordSession) throws -> TrashPage {
        let rows = try db.query("""
            SELECT \(TreeNodes.columns) FROM \(TreeNodes.from)
            WHERE n.deleted_at IS NOT NULL AND n.purged_at IS NULL AND n.version < ? ORDER BY n.version DESC LIMIT ?
            """, before, limit, row: TreeNodes.stored)
        let entries = rows.map { TrashEntry(node: $0.node, path: $0.deletedPath ?? $0.node.name) }
        return TrashPage(trash: entries, next: rows.count == Int(limit) ? rows.last?.node.version : nil)
    }

    /// Inside the caller's transaction: brings nodes back from the trash, each with its
    /// trashed ancestors (highest first), a new version each; a name taken meanwhile
    /// becomes `name (restored)`. `ids` in the order given; a node brought back as
    /// another's ancestor is not reported again.
    static func restore(_ ids: [String], device: Metadata.Device, now: Int64, in db: any RecordSession) throws -> TreeRestoreResponse {
        var restored: [TreeNode] = []
        var done = Set<String>()
        var skipped: [RestoreSkip] = []
        var batch = TreeNodes.Batch()
        for id in ids where !done.contains(id) {
            guard let stored = try TreeNodes.find(id, in: db) else {
                skipped.append(RestoreSkip(id: id, error: "unknown", message: "no node has id \(id)"))
                continue
            }
            if stored.isLive {
                skipped.append(RestoreSkip(id: id, error: "not_deleted", message: "node \(id) ('\(stored.node.name)') is not in the trash"))
                continue
            }
            if stored.purged {
                skipped.append(RestoreSkip(id: id, error: "purged", message: "node \(id) ('\(stored.node.name)') was purged from the trash; its contents are gone"))
                continue
            }
            // The node and its ancestors in the trash, up to the first live one.
            let chain = try TreeNodes.chain(from: id, in: db)
            let trashed = chain.prefix { !$0.isLive }
            let top = trashed.last?.node.parent ?? TreeNode.rootID
            if let gone = trashed.first(where: \.purged) {
                skipped.append(RestoreSkip(id: id, error: "parent_missing", message: "folder \(gone.node.id) ('\(gone.node.name)') above node \(id) was purged from the trash"))
                continue
            }
            guard top == TreeNode.rootID || chain.count > trashed.count else {
                skipped.append(RestoreSkip(id: id, error: "parent_missing", message: "node \(id) is not in the tree (its chain of folders ends at an unknown one)"))
                continue
            }
            for node in trashed.reversed() {
                restored.append(try TreeNodes.bringBack(node, device: device, now: now, in: db, batch: &batch))
                done.insert(node.node.id)
            }
        }
        return TreeRestoreResponse(nodes: restored, skipped: skipped)
    }

    /// The ids of the nodes deleted under folder `under` (itself included) at or after
    /// `since` (seconds) and not purged, oldest deletion first.
    static func deleted(under: String, since: Int64, in db: any RecordSession) throws -> [String]? {
        guard try TreeNodes.find(under, in: db) != nil else { return nil }
        return try db.query("""
            WITH RECURSIVE down(id) AS (
                SELECT id FROM tree_nodes WHERE id = ?
                UNION
                SELECT t.id FROM tree_nodes t JOIN down ON t.parent = down.id WHERE t.id <> t.parent)
            SELECT n.id FROM tree_nodes n JOIN down ON n.id = down.id
            WHERE n.deleted_at IS NOT NULL AND n.purged_at IS NULL AND n.deleted_at >= ? ORDER BY n.version
            """, under, since) { $0.string(0) ?? "" }
    }

    /// Purges nodes deleted at or before `cutoff` (seconds): their versions go (the
    /// collection then frees what nothing else names) and each row stays as a
    /// tombstone, its version unchanged (the feed already told every device of the
    /// delete). Returns how many.
    static func purge(deletedBefore cutoff: Int64, now: Int64, in db: any RecordSession) throws -> Int {
        try db.transaction {
            let due = "SELECT id FROM tree_nodes WHERE deleted_at IS NOT NULL AND purged_at IS NULL AND deleted_at <= ?"
            try db.run("DELETE FROM tree_versions WHERE node IN (\(due))", cutoff)
            return try db.run("""
                UPDATE tree_nodes SET purged_at = ?, hash = NULL, size = NULL, executable = NULL, target = NULL, deleted_path = NULL
                WHERE deleted_at IS NOT NULL AND purged_at IS NULL AND deleted_at <= ?
                """, now, cutoff)
        }
    }

    /// The cutoff of a purge keeping `days` days of trash at `now`; nil for 0 (kept forever).
    static func cutoff(days: Int64, now: Int64) -> Int64? {
        guard days > 0 else { return nil }
        let (seconds, o1) = days.multipliedReportingOverflow(by: 86_400)
        let (value, o2) = now.subtractingReportingOverflow(seconds)
        return o1 || o2 ? .min : value
    }
}

extension SpaceCollector {
    /// Purges the tree's trash of nodes deleted more than `days` days before `now` (0:
    /// nothing, the trash is kept forever). Run before a collection, so the contents only
    /// the purged nodes named are collectable in the same run (after the grace). Returns
    /// how many nodes were purged.
    public func purgeTrash(days: Int64, now: Int64 = Int64(time(nil))) throws -> Int {
        guard let cutoff = TreeTrash.cutoff(days: days, now: now) else { return 0 }
        return try metadata.withSession { db in try TreeTrash.purge(deletedBefore: cutoff, now: now, in: db) }
    }
}
