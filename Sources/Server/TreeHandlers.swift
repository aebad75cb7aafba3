import Crypto
import Protocol
import Storage

/// The workspace tree's calls (Docs/sync.md, "Wire format"): the feed, changes, the
/// trash, restores and a node's versions. Record work is in TreeNodes, TreeFeed and
/// TreeTrash; here are the checks of what a device sent and the replies.
enum TreeHandlers {
    // MARK: GET /v1/tree

    /// What `GET /v1/tree` asks: the version to read after, the page size, how long the
    /// request may wait for a change when there is nothing newer (seconds), and the
    /// device's cursor in the backup records' feed (`records_since`), when the request
    /// watches that feed too.
    struct PageQuery: Sendable {
        let since: Int64
        let limit: Int64
        let wait: Int64
        let recordsSince: Int64?

        init(_ request: HTTPRequest) throws(RequestFailure) {
            since = try request.integer("since", default: 0, in: 0...Int64.max)
            limit = try request.integer("limit", default: Int64(API.maxTreePage), in: 1...Int64(API.maxTreePage))
            wait = try request.integer("wait", default: 0, in: 0...Int64(API.maxTreeWait))
            recordsSince = request.query["records_since"] == nil ? nil : try request.integer("records_since", default: 0, in: 0...Int64.max)
        }

        /// The page has what the request waits for: nodes after its cursor, a cursor past
        /// the tree's end (a server reset: the device learns it at once), or a records'
        /// feed that ends elsewhere than the device's cursor in it (a record or deletion
        /// after it, or a reset feed).
        func isAnswered(by page: TreePage) -> Bool {
            !page.nodes.isEmpty || since > page.latest || (recordsSince != nil && page.recordsLatest != recordsSince)
        }
    }

    static func page(_ request: HTTPRequest, context: ServerContext) -> Route {
        let query: PageQuery
        do { query = try PageQuery(request) } catch { return .respond(error.response) }
        return pageOrHold(query, context: context)
    }

    /// The page, or (when it has nothing for the request and the request may wait) the
    /// request held until the next tree change (or, with `records_since`, the next change
    /// of the records' feed) or the end of its wait (ChangeNotifier.swift), then
    /// answered: one held request per device wakes for either feed. The notifier's
    /// generations are read before the page, so a change the page misses wakes the
    /// request (no lost wake-up).
    static func pageOrHold(_ query: PageQuery, context: ServerContext) -> Route {
        let seen = query.recordsSince == nil ? context.notifier.seen(.tree) : context.notifier.seen(.tree, .records)
        let first: TreePage
        do { first = try page(query, context: context) } catch { return .respond(ServerContext.failure(error)) }
        if query.wait == 0 || query.isAnswered(by: first) { return .respond(.json(200, first)) }
        let deadline = monotonicMilliseconds() + query.wait * 1000
        return .hold { held in
            context.notifier.wait(seen, until: deadline, held: held) { wake in
                wake.shared("tree \(query.since) \(query.limit) \(query.recordsSince ?? -1)") {
                    do {
                        let page = try page(query, context: context)
                        if !query.isAnswered(by: page) && !wake.isFinal { return nil }
                        return .json(200, page)
                    } catch {
                        return ServerContext.failure(error)
                    }
                }
            }
        }
    }

    /// The tree's page, with the records' feed's end when the request watches it.
    private static func page(_ query: PageQuery, context: ServerContext) throws -> TreePage {
        try context.metadata.withSession { db in
            var page = try TreeFeed.page(since: query.since, limit: query.limit, workspace: context.workspaceID, in: db)
            if query.recordsSince != nil { page.recordsLatest = try FileVersions.nextSequence(in: db) - 1 }
            return page
        }
    }

    // MARK: POST /v1/tree/changes

    /// Applies each change on its own, in order, and answers one result per change.
    /// Every change is checked against the document before any is applied, so a request
    /// breaking it (400, `field` naming the change: `changes.3.name`) changes nothing.
    static func apply(_ body: TreeChangesRequest, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        guard !body.changes.isEmpty, body.changes.count <= API.maxTreeChanges else {
            return .error(400, "bad_request", "'changes' has \(body.changes.count) entries; send 1 to \(API.maxTreeChanges) per request", field: "changes")
        }
        var checked: [Result<CheckedTreeChange, ValidationError>] = []
        checked.reserveCapacity(body.changes.count)
        for (i, change) in body.changes.enumerated() {
            do {
                checked.append(.success(try Validation.treeChange(change)))
            } catch where error.kind == .invalid {
                return .error(400, error.code, error.message, field: "changes.\(i).\(error.field)")
            } catch {
                checked.append(.failure(error))
            }
        }
        do {
            let (results, changed) = try context.applyTreeChanges(checked, device: device)
            if changed { context.treeListener.treeChanged() }
            return .json(200, TreeChangesResponse(results: results))
        } catch {
            return ServerContext.failure(error)
        }
    }

    // MARK: the trash and versions

    /// `GET /v1/tree/trash?after=&limit=`: `after` is the previous page's `next`.
    static func trash(_ request: HTTPRequest, context: ServerContext) -> HTTPResponse {
        do {
            let after = try request.integer("after", default: .max, in: 0...Int64.max)
            let limit = try request.integer("limit", default: Int64(API.maxTrashPage), in: 1...Int64(API.maxTrashPage))
            let page = try context.metadata.withSession { db in try TreeTrash.list(before: after, limit: limit, in: db) }
            return .json(200, page)
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `POST /v1/tree/restore`: by ids, or everything deleted under a folder since a time.
    static func restore(_ body: TreeRestoreRequest, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            let request = try Validation.treeRestore(body)
            let now = ServerContext.now()
            let reply = try context.metadata.withSession { db in
                try db.transaction { () throws -> TreeRestoreResponse in
                    switch request {
                    case .ids(let ids):
                        let reply = try TreeTrash.restore(ids, device: device, now: now, in: db)
                        if !reply.nodes.isEmpty { try ChangeFeed.tree.announce(in: db) }
                        return reply
                    case .under(let folder, let since):
                        guard let ids = try TreeTrash.deleted(under: folder, since: since, in: db) else {
                            return TreeRestoreResponse(nodes: [], skipped: [RestoreSkip(id: folder, error: "unknown", message: "no node has id \(folder)")])
                        }
                        let reply = try TreeTrash.restore(ids, device: device, now: now, in: db)
                        if !reply.nodes.isEmpty { try ChangeFeed.tree.announce(in: db) }
                        return reply
                    }
                }
            }
            if !reply.nodes.isEmpty { context.treeListener.treeChanged() }
            return .json(200, reply)
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/tree/nodes/<id>/versions`.
    static func versions(id: String, context: ServerContext) -> HTTPResponse {
        do {
            let id = try Validation.nodeID(id)
            guard let versions = try context.metadata.withSession({ db in try TreeNodes.versions(of: id, in: db) }) else {
                return .error(404, "not_found", "no node has id \(id)")
            }
            return .json(200, TreeVersionsResponse(versions: versions))
        } catch {
            return ServerContext.failure(error)
        }
    }
}

extension ServerContext {
    /// A request's changes, in order, in ONE transaction: a device sending a thousand
    /// changes pays one commit (one `fdatasync`, one round of locks), not a thousand, and
    /// a failure of the records (not a refusal: those are results) changes nothing of the
    /// request. A put of a file first looks at its content outside the transaction, as
    /// `POST /v1/files` does (which blocks of a new content the workspace lacks, a block
    /// of the wrong length); the transaction decides the tree's outcomes before the
    /// content's, so a put that conflicts says `conflict`, not `missing_blocks`.
    /// Returns one result per change and whether any changed the tree (announced to the
    /// other server processes inside the transaction: NOTIFY is delivered at the commit).
    func applyTreeChanges(_ changes: [Result<CheckedTreeChange, ValidationError>], device: Metadata.Device) throws -> (results: [TreeResult], changed: Bool) {
        enum Step {
            case refused(TreeResult)
            case delete(id: String, base: Int64)
            case put(TreePut, TreeNodes.Content?)
        }
        var steps: [Step] = []
        steps.reserveCapacity(changes.count)
        // What the workspace has of the batch's contents and of their blocks: two queries
        // for the whole batch (a batch from a copy puts hundreds of new files), not two a put.
        var manifests: [BlockManifest] = []
        for case .success(.put(let put, let manifest?)) in changes where put.kind == .file { manifests.append(manifest) }
        let known = manifests.isEmpty ? [] : Set(try metadata.presentContents(Array(Set(manifests.map(\.content.hex)))))
        let blocks = Set(manifests.filter { !known.contains($0.content.hex) }.flatMap(Self.nonZeroBlocks))
        let stored = try metadata.blockSizes(Array(blocks))
        for item in changes {
            switch item {
            case .failure(let e):
                steps.append(.refused(TreeResult(status: 422, error: TreeResult.code(e.code), message: e.message, field: e.field)))
            case .success(.delete(let id, let base)):
                steps.append(.delete(id: id, base: base))
            case .success(.put(let put, let manifest)):
                var content: TreeNodes.Content?
                if put.kind == .file, let hash = put.hash, let size = put.size {
                    var absent: [String] = []
                    if let manifest, !known.contains(manifest.content.hex) {
                        do { absent = try absentBlocks(manifest, stored: stored).map(\.digest.hex) } catch let failure as RequestFailure {
                            steps.append(.refused(TreeResult(failure)))
                            continue
                        }
                    }
                    content = TreeNodes.Content(hash: hash, size: size, manifest: manifest, absent: absent)
                }
                steps.append(.put(put, content))
            }
        }
        let now = Self.now()
        return try metadata.withSession { db in
            try db.transaction {
                var results: [TreeResult] = []
                results.reserveCapacity(steps.count)
                var changed = false
                var batch = TreeNodes.Batch()
                for step in steps {
                    let outcome: (result: TreeResult, changed: Bool)
                    switch step {
                    case .refused(let result): outcome = (result, false)
                    case .delete(let id, let base): outcome = try TreeNodes.delete(id: id, base: base, device: device, now: now, in: db, batch: &batch)
                    case .put(let put, let content): outcome = try TreeNodes.put(put, content: content, device: device, now: now, in: db, batch: &batch)
                    }
                    changed = changed || outcome.changed
                    results.append(outcome.result)
                }
                if changed { try ChangeFeed.tree.announce(in: db) }
                return (results, changed)
            }
        }
    }
}

extension TreeResult {
    /// A refusal of the content checks shared with `POST /v1/files`, as a change's result.
    init(_ failure: RequestFailure) {
        var error: ErrorResponse?
        if case .bytes(let bytes) = failure.response.body { error = try? WireJSON.decode(ErrorResponse.self, from: bytes) }
        self.init(status: failure.response.status, error: Self.code(error?.error ?? "bad_request"), message: error?.message ?? "the content was refused",
                  field: error?.field, missing: error?.missing)
    }

    /// A result's code for an error code of the rest of the API: a change breaking a
    /// rule is `invalid`, where a request is `bad_request`.
    static func code(_ code: String) -> String { code == "bad_request" ? invalid : code }
}
