import Crypto
import Protocol
import Storage

/// Files (path → content), listing by prefix, the change feed, and device watermarks.
enum FileHandlers {
    /// Records `path → content`. Idempotent: the same record again returns the stored one
    /// with its sequence unchanged; a changed record gets the next server sequence.
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
                    return .error(409, "content_missing", "the workspace has no content \(digest.hex); send its block list ('blocks') with the record, after uploading the blocks (POST /v1/uploads)", field: "blocks")
                }
                let absent = try context.absentBlocks(sent)
                if !absent.isEmpty { throw ServerContext.missingBlocks(absent.map(\.digest.hex)) }
                newContent = sent
            }
            let (record, created) = try context.metadata.withDatabase { db -> (FileRecord, Bool) in
                try db.transaction {
                    // The blocks are checked again here: the manifest becomes visible with the file, or neither.
                    if let newContent { try ServerContext.insertContent(newContent, in: db) }
                    let select = "SELECT \(Metadata.fileColumns) FROM files f JOIN devices d ON d.id = f.device_id WHERE f.path = ?"
                    if let existing = try db.queryOne(select, path, row: Metadata.fileRecord),
                       existing.hash == digest.hex, existing.size == body.size, existing.captureDate == body.captureDate,
                       existing.mtime == body.mtime, existing.device == device.name, existing.deviceSequence == body.deviceSequence {
                        return (existing, false)
                    }
                    let next = (try db.queryOne("SELECT COALESCE(MAX(sequence), 0) + 1 FROM files") { $0.int64(0) }) ?? 1
                    try db.run("""
                        INSERT INTO files(path, hash, size, capture_date, mtime, device_id, device_sequence, sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        ON CONFLICT(path) DO UPDATE SET hash = excluded.hash, size = excluded.size, capture_date = excluded.capture_date,
                            mtime = excluded.mtime, device_id = excluded.device_id, device_sequence = excluded.device_sequence, sequence = excluded.sequence
                        """, path, digest.hex, body.size, body.captureDate, body.mtime, device.id, body.deviceSequence, next)
                    return (FileRecord(path: path, hash: digest.hex, size: body.size, captureDate: body.captureDate, mtime: body.mtime,
                                       deviceSequence: body.deviceSequence, device: device.name, sequence: next), true)
                }
            }
            return .json(created ? 201 : 200, record)
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/files?prefix=&after=&limit=`: records whose path starts with the prefix,
    /// by path, a page at a time (`next` names the `after` of the next page).
    static func list(_ request: HTTPRequest, context: ServerContext) -> HTTPResponse {
        do {
            let limit = try request.integer("limit", default: Int64(API.maxListPage), in: 1...Int64(API.maxListPage))
            let prefix = try Validation.prefix(request.query["prefix"] ?? "")
            let after = request.query["after"] ?? ""
            let records = try context.metadata.withDatabase { db in
                // A range scan on the primary key: from the prefix up to the prefix followed by
                // the highest code point; substr() keeps exactly the paths that start with it.
                try db.query("""
                    SELECT \(Metadata.fileColumns) FROM files f JOIN devices d ON d.id = f.device_id
                    WHERE f.path >= ?1 AND f.path < ?2 AND f.path > ?3 AND substr(f.path, 1, length(?1)) = ?1
                    ORDER BY f.path LIMIT ?4
                    """, prefix, prefix + "\u{10FFFF}", after, limit, row: Metadata.fileRecord)
            }
            return .json(200, FileListResponse(files: records, next: records.count == Int(limit) ? records.last?.path : nil))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// `GET /v1/changes?since=N&limit=M`: records changed after server sequence N, in order.
    static func changes(_ request: HTTPRequest, context: ServerContext) -> HTTPResponse {
        do {
            let since = try request.integer("since", default: 0, in: 0...Int64.max)
            let limit = try request.integer("limit", default: Int64(API.maxChangesPage), in: 1...Int64(API.maxChangesPage))
            let records = try context.metadata.withDatabase { db in
                try db.query("SELECT \(Metadata.fileColumns) FROM files f JOIN devices d ON d.id = f.device_id WHERE f.sequence > ? ORDER BY f.sequence LIMIT ?",
                             since, limit, row: Metadata.fileRecord)
            }
            return .json(200, ChangesResponse(changes: records, nextSequence: records.last?.sequence ?? since))
        } catch {
            return ServerContext.failure(error)
        }
    }

    static func watermark(device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            let mark = try context.metadata.withDatabase { db in
                try db.queryOne("SELECT watermark_sequence, watermark_capture_date FROM devices WHERE id = ? AND watermark_sequence IS NOT NULL", device.id) {
                    Watermark(sequence: $0.int64(0), newestCaptureDate: $0.isNull(1) ? nil : $0.int64(1))
                }
            }
            return .json(200, WatermarkResponse(device: device.name, watermark: mark))
        } catch {
            return ServerContext.failure(error)
        }
    }

    static func setWatermark(_ body: Watermark, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        do {
            _ = try Validation.nonNegative(body.sequence, field: "sequence")
            try context.metadata.withDatabase { db in
                try db.run("UPDATE devices SET watermark_sequence = ?, watermark_capture_date = ?, watermark_updated_at = ? WHERE id = ?",
                           body.sequence, body.newestCaptureDate, ServerContext.now(), device.id)
            }
            return .json(200, WatermarkResponse(device: device.name, watermark: body))
        } catch {
            return ServerContext.failure(error)
        }
    }
}
