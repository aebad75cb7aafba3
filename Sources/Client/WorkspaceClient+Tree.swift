import Protocol

/// The workspace tree's calls (Docs/sync.md, "Wire format"). A change the server
/// refuses (a conflict, a name taken, blocks missing) is a result, not an error: only
/// a request that failed as a whole throws.
extension WorkspaceClient {
    /// The nodes changed after version `since`, parents before children; pass the
    /// page's `next` next time. With `wait` (1 to 60 seconds) a server with nothing newer
    /// may hold the request until a change commits or the wait ends: the request's own
    /// limit is then the wait and a margin, not the low-speed check.
    /// `recordsSince`: this device's cursor in the backup records' feed; the request then
    /// also waits on that feed, and the page says where it ends (`recordsLatest`).
    /// `cancelled`: asked about once a second while the server holds the request; true
    /// gives the request up (`.cancelled`).
    public func treePage(since: Int64, limit: Int = API.maxTreePage, wait: Int = 0, recordsSince: Int64? = nil,
                         cancelled: (@Sendable () -> Bool)? = nil) throws(ClientError) -> TreePage {
        let records = recordsSince.map { "&records_since=\($0)" } ?? ""
        let reply = try connection.perform(method: "GET", url: baseURL + API.tree + "?since=\(since)&limit=\(limit)&wait=\(wait)" + records,
                                           headers: [try authHeader()], progress: cancelled.map { c in { _ in !c() } },
                                           timeouts: wait > 0 ? connection.timeouts.holding(wait) : nil)
        try check(reply, expect: [200])
        return try decode(TreePage.self, reply)
    }

    /// Sends changes, `API.maxTreeChanges` per request, and returns one result per
    /// change, in order. A change is applied on its own: sending the same changes again
    /// after a failure does nothing twice (the server answers "already so").
    public func applyTreeChanges(_ changes: [TreeChange]) throws(ClientError) -> [TreeResult] {
        var results: [TreeResult] = []
        results.reserveCapacity(changes.count)
        var start = 0
        while start < changes.count {
            let batch = Array(changes[start..<min(changes.count, start + API.maxTreeChanges)])
            let reply = try decode(TreeChangesResponse.self, call("POST", API.treeChanges, json: TreeChangesRequest(changes: batch)))
            guard reply.results.count == batch.count else {
                throw .invalidResponse("\(batch.count) tree changes were answered with \(reply.results.count) results")
            }
            results += reply.results
            start += batch.count
        }
        return results
    }

    /// One page of the trash, newest deletion first; pass its `next` as `after` for the
    /// following page (nil on the last).
    public func trash(after: Int64? = nil, limit: Int = API.maxTrashPage) throws(ClientError) -> TrashPage {
        var query = API.treeTrash + "?limit=\(limit)"
        if let after { query += "&after=\(after)" }
        return try decode(TrashPage.self, call("GET", query))
    }

    /// Brings nodes back from the trash (their trashed folders too); a name taken
    /// meanwhile becomes `name (restored)`.
    public func restore(ids: [String]) throws(ClientError) -> TreeRestoreResponse {
        try decode(TreeRestoreResponse.self, call("POST", API.treeRestore, json: TreeRestoreRequest.ids(ids)))
    }

    /// Brings back everything deleted under folder `under` at or after `since` (Unix seconds).
    public func restore(under: String, since: Int64) throws(ClientError) -> TreeRestoreResponse {
        try decode(TreeRestoreResponse.self, call("POST", API.treeRestore, json: TreeRestoreRequest.under(under, since: since)))
    }

    /// Every content file node `id` has had, oldest first; `.notFound` for an unknown id.
    /// An old one becomes current again by a put of its hash (no blocks needed).
    public func nodeVersions(id: String) throws(ClientError) -> [TreeVersion] {
        try decode(TreeVersionsResponse.self, call("GET", API.treeNodePrefix + Self.percentEncode(id) + API.versionsSuffix)).versions
    }
}
