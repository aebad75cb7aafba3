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
            return TreePage(nodes: nodes, next: last.version, latest: latest, workspace: workspace)
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
