import Crypto
import Protocol
import Storage

/// Files ((device, path) → versions of contents, FileVersions.swift), listing by
/// prefix, the change feed, and device watermarks.
enum FileHandlers {
    /// Records `(device, path) → content` for the token's device. Idempotent: the same
    /// record again returns the stored one with its sequence unchanged; a changed record
    /// gets the next server sequence, and another hash adds a version (older ones stay).
    /// A content the workspace does not hold yet needs its block list: the server checks
    /// the identity, then records the manifest and the file in one transaction if every
    /// non-zero block is stored (409 `missing_blocks` listing the others if not).
    static func record(_ body: FileRecord, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            let path = try Validation.path(body.path)
            let digest = try Validation.hash(body.hash)
            _ = try Validation.contentSize(body.size)
            let sent = try body.blocks.map { blocks throws(ValidationError) in
                try Validation.manifest(content: body.hash, size: body.size, blocks: blocks, contentField: "hash")
            }
            var newContent: BlockManifest?
            if let known = try context.metadata.manifest(digest) {
                guard known.size == body.size else {
                    return .error(409, "size_conflict", "size \(body.size) does not match the workspace's content \(digest.hex) of \(known.size) bytes; check the size you send", field: "size")
                }
            } else {
                guard let sent else {
                    return ServerContext.contentMissing(digest.hex).response
                }
                let absent = try context.absentBlocks(sent)
                if !absent.isEmpty { throw ServerContext.missingBlocks(absent.map(\.digest.hex)) }
                newContent = sent
            }
            var checked = body
            checked.path = path
            checked.hash = digest.hex
            let (record, created) = try context.metadata.withSession { db -> (FileRecord, Bool) in
                try db.transaction {
                    // The blocks are checked again here: the manifest becomes visible with the file, or neither.
                    if let newContent { try ServerContext.insertContent(newContent, in: db) }
                    // A known content is looked for again: the collection may have taken it since.
                    else if try !ServerContext.contentExists(digest.hex, in: db) {
                        guard let sent else { throw ServerContext.contentMissing(digest.hex) }
                        try ServerContext.insertContent(sent, in: db)
                    }
                    return try FileVersions.record(checked, device: device, now: ServerContext.now(), in: db)
                }
            }
            // Committed: the requests waiting at the end of the feed read it again.
            if created { context.notifier.changed(.records) }
            return .json(created ? 201 : 200, record)
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/files?device=&prefix=&after=&limit=`: the current version of each
    /// (device, path) whose path starts with the prefix, by device then path, a page at
    /// a time (`next` names the `after` of the next page: a path with `device`, else
    /// `DEVICE/PATH`).
    static func list(_ request: HTTPRequest, context: ServerContext) -> HTTPResponse {
        do {
            let limit = try request.integer("limit", default: Int64(API.maxListPage), in: 1...Int64(API.maxListPage))
            let prefix = try Validation.prefix(request.query["prefix"] ?? "")
            let device = try request.deviceName()
            let afterText = request.query["after"] ?? ""
            var cursor = FileVersions.Cursor(device: device, path: afterText)
            if device == nil, !afterText.isEmpty {
                // DEVICE/PATH; a bare DEVICE starts at that device's first file.
                let slash = afterText.firstIndex(of: "/") ?? afterText.endIndex
                cursor = FileVersions.Cursor(device: String(afterText[..<slash]),
                                             path: slash == afterText.endIndex ? "" : String(afterText[afterText.index(after: slash)...]))
            }
            let records = try context.metadata.withSession { db in
                try FileVersions.listCurrent(device: device, prefix: prefix, after: cursor, limit: limit, in: db)
            }
            var next: String?
            if records.count == Int(limit), let last = records.last {
                next = device == nil ? (last.device ?? "") + "/" + last.path : last.path
            }
            return .json(200, FileListResponse(files: records, next: next))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/files/versions?device=&path=`: every version of one device's path,
    /// oldest first; 404 when the device never recorded that path.
    static func versions(_ request: HTTPRequest, context: ServerContext) -> HTTPResponse {
        do {
            guard let device = try request.deviceName() else {
                return .error(400, "bad_request", "'device' is required: the device whose backup this is (GET /v1/files lists them)", field: "device")
            }
            let path = try Validation.path(request.query["path"] ?? "")
            let versions = try context.metadata.withSession { db in try FileVersions.versions(device: device, path: path, in: db) }
            if versions.isEmpty { return .error(404, "not_found", "device '\(device)' has no backup of '\(path)'") }
            return .json(200, FileVersionsResponse(device: device, path: path, versions: versions))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/changes?since=N&limit=M&wait=S`: versions recorded after server sequence
    /// N, in order, each with its device (an older version of a path is never replaced
    /// here), and the administrator's deletions after N (`deletions`), both cut at one
    /// sequence. With `wait` (seconds) and nothing after N, the request is held until a
    /// change commits or the wait ends (ChangeNotifier.swift), then answered; a cursor
    /// past the feed's end (a server reset) is answered at once, so the device learns it.
    static func changes(_ request: HTTPRequest, context: ServerContext) -> Route {
        do {
            let since = try request.integer("since", default: 0, in: 0...Int64.max)
            let limit = try request.integer("limit", default: Int64(API.maxChangesPage), in: 1...Int64(API.maxChangesPage))
            let wait = try request.integer("wait", default: 0, in: 0...Int64(API.maxChangesWait))
            // Read before the page: a commit the page misses moves it (no lost wake-up).
            let seen = context.notifier.seen(.records)
            let page = try changesPage(since: since, limit: limit, context: context)
            if wait == 0 || !page.isEmpty || since > page.latest { return .respond(.json(200, page.response(workspace: context.workspaceID))) }
            let deadline = monotonicMilliseconds() + wait * 1000
            return .hold { held in
                context.notifier.wait(seen, until: deadline, held: held) { wake in
                    wake.shared("changes \(since) \(limit)") {
                        do {
                            let page = try changesPage(since: since, limit: limit, context: context)
                            if page.isEmpty && since <= page.latest && !wake.isFinal { return nil }
                            return .json(200, page.response(workspace: context.workspaceID))
                        } catch {
                            return ServerContext.failure(error)
                        }
                    }
                }
            }
        } catch {
            return .respond(ServerContext.failure(error))
        }
    }

    private static func changesPage(since: Int64, limit: Int64, context: ServerContext) throws -> ChangesPage {
        let (records, deletions, latest) = try context.metadata.withSession { db in
            (try FileVersions.changes(since: since, limit: limit, in: db), try FileVersions.deletions(since: since, limit: limit, in: db),
             try FileVersions.nextSequence(in: db) - 1)
        }
        return ChangesPage(records: records, deletions: deletions, since: since, limit: Int(limit), latest: latest)
    }

    static func watermark(device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            let mark = try context.metadata.watermark(deviceID: device.id)
            return .json(200, WatermarkResponse(device: device.name, watermark: mark))
        } catch {
            return ServerContext.failure(error)
        }
    }

    static func setWatermark(_ body: Watermark, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            _ = try Validation.nonNegative(body.sequence, field: "sequence")
            try context.metadata.setWatermark(body, deviceID: device.id, now: ServerContext.now())
            return .json(200, WatermarkResponse(device: device.name, watermark: body))
        } catch {
            return ServerContext.failure(error)
        }
    }
}
