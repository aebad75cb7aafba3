import Crypto
import Protocol
import Storage

/// One page of the tree's feed (`GET /v1/tree`): the nodes changed after `since`, in
/// version order, except that a node never comes before its parent.
///
/// The *window* is the first `limit` nodes by version. Each window node is preceded by
/// its ancestors whose version is also after `since`, the highest first, when they are
/// not in the page already (an ancestor from beyond the window is sent again at its own
/// place in a later page, which changes nothing on a device). The walk goes up the whole
/// chain, not only to the first ancestor the device has: a folder it has may have been
/// moved since under one it has not. So when a device applies a page in order, every
/// node's chain of parents is already as it is on the server: it never sees a child
/// before its parent, and never a cycle (a page applied up to any point leaves every
/// applied node under ancestors in their current state).
///
/// `next` is the version of the last window node: ancestors sent ahead do not move it,
/// or the nodes between the window and them would be skipped.
enum TreeFeed {
    static func page(since: Int64, limit: Int64, workspace: String, in db: any RecordSession) throws -> TreePage {
        // One transaction: the window, the ancestors and `latest` from one state of the tree.
        try db.transaction {
            let window = try db.query("SELECT \(TreeNodes.columns) FROM \(TreeNodes.from) WHERE n.version > ? ORDER BY n.version LIMIT ?",
                                      since, limit, row: TreeNodes.stored).map(\.node)
            let latest = try TreeNodes.latest(in: db)
            guard let last = window.last else { return TreePage(nodes: [], next: since, latest: latest, workspace: workspace) }
            var known: [String: TreeNode] = [:]
            for node in try ancestors(since: since, limit: limit, in: db) { known[node.id] = node }
            for node in window { known[node.id] = node }

            var sent = Set<String>()
            var nodes: [TreeNode] = []
            nodes.reserveCapacity(window.count)
            for node in window where !sent.contains(node.id) {
                var ahead: [TreeNode] = []
                var up = node.parent
                var steps = 0
                while up != TreeNode.rootID, let ancestor = known[up], steps < TreeNodes.maxDepth {
                    if ancestor.version > since && !sent.contains(up) { ahead.append(ancestor) }
                    up = ancestor.parent
                    steps += 1
                }
                for ancestor in ahead.reversed() where sent.insert(ancestor.id).inserted { nodes.append(ancestor) }
                sent.insert(node.id)
                nodes.append(node)
            }
            try addBlockLists(&nodes, in: db)
            return TreePage(nodes: nodes, next: last.version, latest: latest, workspace: workspace)
        }
    }

    /// Each live, non-empty file of at most `API.feedBlockListBlocks` blocks gets its
    /// content's block list: a few queries a page, where the device would otherwise ask
    /// once per file. A list that does not fit its size (a damaged row) is left out: the
    /// device then asks for it, and hears the error there.
    private static func addBlockLists(_ nodes: inout [TreeNode], in db: any RecordSession) throws {
        let limit = Int64(API.feedBlockListBlocks) * Int64(Blocks.size)
        var wanted: [String] = []
        var seen = Set<String>()
        for n in nodes where n.kind == .file && !n.deleted {
            guard let hash = n.hash, let size = n.size, size > 0, size <= limit, seen.insert(hash).inserted else { continue }
            wanted.append(hash)
        }
        var lists: [String: [String]] = [:]
        for start in stride(from: 0, to: wanted.count, by: 500) {
            let slice = Array(wanted[start..<min(start + 500, wanted.count)])
            let marks = Array(repeating: "?", count: slice.count).joined(separator: ",")
            let rows = try db.query("SELECT hash, size, blocks FROM contents WHERE hash IN (\(marks))", arguments: slice) {
                ($0.string(0) ?? "", $0.int64(1), $0.string(2) ?? "")
            }
            for (hash, size, text) in rows {
                guard let list = Metadata.decodeBlockList(text), size >= 0, list.count == Blocks.count(forSize: size) else { continue }
                lists[hash] = list.map(\.hex)
            }
        }
        if lists.isEmpty { return }
        for i in nodes.indices where nodes[i].kind == .file && !nodes[i].deleted {
            if let hash = nodes[i].hash { nodes[i].blocks = lists[hash] }
        }
    }

    /// Every ancestor of the window's nodes (of any version), each once: one recursive
    /// query up from the window's parents. Its `UNION` keeps each id once, so folders
    /// the window shares are read once.
    private static func ancestors(since: Int64, limit: Int64, in db: any RecordSession) throws -> [TreeNode] {
        try db.query("""
            WITH RECURSIVE up(id, parent) AS (
                SELECT t.id, t.parent FROM tree_nodes t
                WHERE t.id IN (SELECT w.parent FROM (SELECT parent FROM tree_nodes WHERE version > ? ORDER BY version LIMIT ?) w)
                UNION
                SELECT t.id, t.parent FROM tree_nodes t JOIN up ON t.id = up.parent WHERE up.id <> up.parent)
            SELECT \(TreeNodes.columns) FROM \(TreeNodes.from) JOIN up ON up.id = n.id WHERE up.id <> up.parent
            """, since, limit, row: TreeNodes.stored).map(\.node)
    }
}
