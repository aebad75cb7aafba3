import Crypto
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `POST /v1/uploads` and the tus creation endpoint `POST /v1/tus`: find or make the
/// one upload of each block a content lacks (idempotent per block hash), and hand out
/// their presigned URLs.
enum UploadHandlers {
    enum Outcome {
        case present
        case upload(UploadRow, created: Bool)
    }

    /// The upload plan of a content: `present` when its manifest is stored, else one
    /// tus upload per distinct non-zero block the workspace lacks (possibly none).
    static func create(_ body: CreateUploadRequest, request: HTTPRequest, device: Metadata.Device, context: ServerContext) -> HTTPResponse {
        context.sweepIfDue()
        do {
            let manifest = try Validation.manifest(content: body.content, size: body.size, blocks: body.blocks)
            if let known = try context.metadata.manifest(manifest.content) {
                guard known.size == manifest.size else {
                    throw RequestFailure(409, "size_conflict", "the workspace has content \(manifest.content.hex) with \(known.size) bytes, not \(manifest.size); check the size you send", field: "size")
                }
                return .json(200, CreateUploadResponse(status: CreateUploadResponse.present))
            }
            // URLs to a store devices reach themselves point at it, not at the Host asked.
            let presigned = context.blocks.presigned
            let base = try presigned == nil ? context.publicBase(for: request) : ""
            var blocks: [BlockUploadInfo] = []
            var anyCreated = false
            var expires = context.configuration.uploadExpires(after: ServerContext.now())
            let absent = try context.absentBlocks(manifest)
            if let refusal = try context.uploadLimitRefusal(hashes: absent.map(\.digest.hex), device: device) { throw refusal }
            try context.checkQuota(adding: absent.reduce(0) { $0 + $1.length })
            for block in absent {
                if let presigned {
                    // A presigned PUT straight to the store; nothing is kept here.
                    let planned = presigned.plan(block, expiresIn: context.configuration.objectPutExpiry)
                    blocks.append(planned.info)
                    expires = min(expires, planned.expires)
                    continue
                }
                // A block stored since absentBlocks looked (another device) needs no upload.
                guard case .upload(let row, let created) = try findOrCreate(block.digest, size: block.length, device: device, context: context,
                                                                            tombstoneIfPresent: false, field: "blocks.\(block.index)") else { continue }
                let url = context.presignedURL(row, base: base, device: device)
                blocks.append(BlockUploadInfo(index: block.index, hash: block.digest.hex, length: row.length, url: url.absolute, offset: row.received))
                anyCreated = anyCreated || created
                expires = min(expires, url.expires)
            }
            return .json(anyCreated ? 201 : 200, CreateUploadResponse(status: CreateUploadResponse.upload, expiresAt: expires, blocks: blocks))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// The one upload of block `digest`, made if needed; its expiry is pushed out to now +
    /// expiry. With `tombstoneIfPresent`, a present block yields a completed upload (tus
    /// creation must answer with a Location). `field` names the request's part at fault
    /// in a size conflict.
    static func findOrCreate(_ digest: SHA256Digest, size: Int64, device: Metadata.Device, context: ServerContext,
                             tombstoneIfPresent: Bool, field: String) throws -> Outcome {
        guard size > 0 && size <= Int64(Blocks.size) else {
            throw RequestFailure(size > 0 ? 413 : 400, size > 0 ? "body_too_large" : "bad_request",
                                 "a block upload has 1 to \(Blocks.size) bytes (4 MiB), not \(size): cut the file into 4 MiB blocks (Docs/protocol.md); an empty file needs no upload",
                                 field: field)
        }
        guard !Blocks.isZero(digest, length: Int(size)) else {
            throw RequestFailure(400, "bad_request", "block \(digest.hex) is \(size) zero bytes: zero blocks are never stored or sent, they count as present", field: field)
        }
        var present = false
        if let existing = try context.presentBlockSize(digest) {
            guard existing == size else {
                throw RequestFailure(409, "size_conflict", "the workspace has block \(digest.hex) with \(existing) bytes, not \(size); check the size you send", field: field)
            }
            if !tombstoneIfPresent { return .present }
            present = true
        }
        let now = ServerContext.now()
        let expires = context.configuration.uploadExpires(after: now)
        let (found, created) = try context.metadata.findOrCreateUpload(hash: digest.hex, size: size, deviceID: device.id, present: present,
                                                                       now: now, expires: expires, field: field)
        var row = found
        if created && !present {
            let fd = try FileIO.open(context.stagingPath(uploadID: row.id), O_WRONLY | O_CREAT, 0o600)
            FileIO.close(fd)
        }
        if !created, !row.completed, row.received == row.length {
            // Every byte on file but the block never committed: the server was killed
            // between the last PATCH's offset and the commit (or the disk was full then).
            // Handed out as it is, the ticket would say nothing is left to send, the device
            // would send nothing, and the content would stay missing forever.
            row = try finishReceived(row, digest: digest, context: context)
            if row.completed && !tombstoneIfPresent { return .present }
        }
        return .upload(row, created: created)
    }

    /// Commits an upload whose every byte was received (its claim taken, so that no PATCH
    /// or sweep runs beside it) and returns the row as it is now: completed, or back at
    /// offset 0 when the bytes are not the block (the device sends it again).
    static func finishReceived(_ row: UploadRow, digest: SHA256Digest, context: ServerContext) throws -> UploadRow {
        guard let claimed = context.uploads.claim(row.id) else { return row }   // a request on it now finishes it
        claimed?.cancel()
        do {
            // Read again under the claim: the request that held it before may have committed
            // the upload (its staging file is then a block in the store) or the collection
            // removed the row since `row` was read.
            guard let current = try context.upload(id: row.id) else {
                context.uploads.remove(row.id)
                return row
            }
            let done = try commitReceived(current, digest: digest, context: context)
            if done.completed { context.uploads.remove(row.id) } else { context.uploads.release(row.id, hasher: nil) }
            return done
        } catch let failure as RequestFailure where failure.response.status == Tus.checksumMismatchStatus {
            context.uploads.release(row.id, hasher: nil)
            return try context.upload(id: row.id) ?? row
        } catch {
            context.uploads.release(row.id, hasher: nil)
            throw error
        }
    }

    /// An upload whose every byte was recorded but whose commit did not happen (a kill,
    /// a full disk) is committed now. The caller holds the upload's claim.
    static func commitReceived(_ row: UploadRow, digest: SHA256Digest, context: ServerContext) throws -> UploadRow {
        guard !row.completed, row.received == row.length, row.length > 0 else { return row }
        let path = context.stagingPath(uploadID: row.id)
        let fd = try FileIO.open(path, O_RDWR)
        defer { FileIO.close(fd) }
        if let failure = context.commit(stagingPath: path, fd: fd, digest: digest, length: row.length, computed: nil, uploadID: row.id) {
            throw RequestFailure(failure)
        }
        return try context.upload(id: row.id) ?? row
    }
}

extension ServerContext {
    /// The base of the presigned URLs in the reply to `request`: `--public-url`, else the
    /// request's Host (checked: `urlHost`), else the address the server listens on, with
    /// https when the server speaks TLS.
    /// Asked before any upload is made, so a bad Host changes nothing.
    func publicBase(for request: HTTPRequest) throws(RequestFailure) -> String {
        if let publicURL = configuration.publicURL { return publicURL }
        return configuration.scheme + "://" + (try request.urlHost() ?? "\(configuration.host):\(configuration.port)")
    }

    /// The presigned URL of an upload for `device`, valid until the row's expiry or the device's revocation.
    func presignedURL(_ row: UploadRow, base: String, device: Metadata.Device) -> (absolute: String, relative: String, expires: Int64) {
        let signed = Presigner.Signed(method: "PATCH", path: API.tusPrefix + row.id, hash: row.hash, size: row.length, expires: row.expiresAt,
                                      device: Revocation.urlParameter(device))
        let relative = presigner.sign(signed)
        return (base + relative, relative, row.expiresAt)
    }

    func upload(id: String) throws -> UploadRow? { try metadata.upload(id: id) }
}

/// tus 1.0 on `/v1/tus` (creation, token-authenticated) and on presigned
/// `/v1/tus/<id>?…` resources (HEAD, PATCH, DELETE; no token).
enum TusHandlers {
    static func options() -> HTTPResponse { Tus.options() }

    static func create(_ request: HTTPRequest, device: Metadata.Device, context: ServerContext) -> Route {
        if let version = request.header(Tus.resumable), version != API.tusVersion { return .respond(Tus.unsupportedVersion(version)) }
        if request.header("Upload-Defer-Length") != nil {
            return .respond(.error(400, "bad_request", "Upload-Defer-Length is not supported; send Upload-Length", field: "Upload-Defer-Length"))
        }
        guard let lengthText = request.header(Tus.uploadLength), WirePatterns.matches(WirePatterns.uploadLength, lengthText), let length = Int64(lengthText) else {
            if let text = request.header(Tus.uploadLength), WirePatterns.matches("^[1-9][0-9]*$", text) {
                // tus: an Upload-Length over Tus-Max-Size is 413.
                return .respond(.error(413, "body_too_large", "a tus upload here is one block of at most \(Blocks.size) bytes (4 MiB), not \(text): cut the file into blocks and record it with POST /v1/files (Docs/protocol.md)",
                                       field: Tus.uploadLength, headers: [("Tus-Max-Size", String(Blocks.size))]))
            }
            return .respond(.error(400, "bad_request", "Upload-Length must be the block's size in bytes, 1 to \(Blocks.size), in decimal", field: Tus.uploadLength))
        }
        // The header's form is the document's pattern; the sha256 pair is the first of that form.
        guard let metadataText = request.header(Tus.uploadMetadata), WirePatterns.matches(WirePatterns.uploadMetadata, metadataText),
              let metadata = Tus.parseMetadataPairs(metadataText),
              let raw = metadata.first(where: { $0.key == "sha256" && ($0.value.count == 32 || $0.value.count == 64) })?.value else {
            return .respond(.error(400, "bad_request", "Upload-Metadata must be 'key base64' pairs joined by ',', one of them 'sha256 <base64 of the block's SHA-256: 64 hex digits or 32 bytes>': this server stores blocks by hash",
                                   field: "Upload-Metadata.sha256"))
        }
        let hex = raw.count == 32 ? Hex.encode(raw) : String(decoding: raw, as: UTF8.self)
        guard let digest = SHA256Digest(hex: hex) else {
            // Base64 of 64 bytes that are not hex digits: the form fits, the content does not.
            return .respond(.error(422, "bad_request", "Upload-Metadata sha256 is base64 of 64 bytes that are not hex digits; send base64 of the 64 hex digits (or of the 32 raw bytes)", field: "Upload-Metadata.sha256"))
        }
        if context.blocks.presigned != nil {
            // tus keeps an upload's bytes on the server's disk; a server whose devices
            // upload straight to its store keeps none.
            // (Checked after the headers, so a malformed request is still a 400.)
            return .respond(.error(404, "not_found", "this server keeps blocks in an object store: there is no tus upload here; ask POST /v1/uploads for presigned PUTs"))
        }
        do {
            let base = try context.publicBase(for: request)
            if let refusal = try context.uploadLimitRefusal(hashes: [digest.hex], device: device) { throw refusal }
            if try context.presentBlockSize(digest) == nil { try context.checkQuota(adding: length) }
            guard case .upload(let row, _) = try UploadHandlers.findOrCreate(digest, size: length, device: device, context: context,
                                                                             tombstoneIfPresent: true, field: Tus.uploadLength) else {
                return .respond(.error(500, "internal", "tus creation found no upload row"))
            }
            let url = context.presignedURL(row, base: base, device: device)
            return .respond(.empty(201, headers: [("Location", url.absolute), (Tus.resumable, API.tusVersion),
                                                  (Tus.uploadOffset, String(row.received)), (Tus.uploadExpires, HTTPDate.format(url.expires))]))
        } catch {
            return .respond(ServerContext.failure(error))
        }
    }

    /// OPTIONS, HEAD, PATCH or DELETE on a presigned upload resource (the router has
    /// refused other methods with 405).
    static func resource(_ request: HTTPRequest, id: String, context: ServerContext) -> Route {
        let signed: Presigner.Signed
        do {
            signed = try context.presigner.verify(method: "PATCH", path: request.path, query: { request.query[$0] }, now: ServerContext.now())
        } catch {
            // A malformed hash, size or expiry is a bad request naming the argument; a
            // missing, malformed or wrong signature, or an expired URL, is a refusal.
            if let argument = error.argument, argument != "sig" {
                return .respond(.error(400, "bad_request", error.message, field: argument))
            }
            return .respond(.error(403, "forbidden", error.message))
        }
        var headers = [(Tus.resumable, API.tusVersion), (Tus.uploadExpires, HTTPDate.format(signed.expires))]
        // OPTIONS needs no Tus-Resumable (tus 1.0 core), but the same URL as the other verbs.
        if request.method == "OPTIONS" { return .respond(Tus.options().adding([(Tus.uploadExpires, HTTPDate.format(signed.expires))])) }
        if let version = request.header(Tus.resumable), version != API.tusVersion { return .respond(Tus.unsupportedVersion(version)) }
        if let refusal = context.presignedRefusal(signed, headers: headers, note: request.note) { return answer(request, refusal) }
        let notFound = HTTPResponse.error(404, "not_found", "upload \(id) does not exist (terminated or expired); create it again with POST /v1/uploads", headers: headers)
        guard let claim = context.uploads.claim(id) else {
            if request.method == "HEAD", let row = try? context.upload(id: id), row.hash == signed.hash {
                return .respond(head(row, headers: headers))
            }
            return answer(request, .error(409, "upload_busy", "another request is writing this upload now; wait for it, then HEAD for the offset", headers: headers))
        }
        var hasher = claim
        let row: UploadRow
        do {
            guard let found = try context.upload(id: id), found.hash == signed.hash, found.length == signed.size,
                  let digest = SHA256Digest(hex: found.hash) else {
                hasher?.cancel()
                context.uploads.remove(id)
                return answer(request, notFound)
            }
            if let h = hasher, h.position != found.received {
                h.cancel()
                hasher = nil
            }
            row = try UploadHandlers.commitReceived(found, digest: digest, context: context)
            if row.completed, let h = hasher {
                h.cancel()
                hasher = nil
            }
            switch request.method {
            case "HEAD":
                context.uploads.release(id, hasher: hasher)
                return .respond(head(row, headers: headers))
            case "DELETE":
                hasher?.cancel()
                _ = unlink(context.stagingPath(uploadID: id))
                try context.metadata.deleteUpload(id: id)
                context.uploads.remove(id)
                return .respond(.empty(204, headers: headers))
            default:
                if hasher == nil && !row.completed {
                    // A hasher closed while idle (or never made in this process) is opened
                    // again: it reads back what is already received while this PATCH arrives.
                    hasher = context.uploads.makeHasher(path: context.stagingPath(uploadID: id), at: row.received)
                }
                headers.append((Tus.uploadLength, String(row.length)))
                return patch(request, row: row, digest: digest, hasher: hasher, headers: headers, context: context)
            }
        } catch {
            context.uploads.release(id, hasher: hasher)
            return .respond(ServerContext.failure(error).adding(headers))
        }
    }

    /// A PATCH answered before its body is used (busy, gone, wrong offset, complete): a
    /// body of at most one block is read and dropped first, so the client hears the
    /// answer. Answered at once, the connection closes under a client still sending,
    /// which then sees a broken connection instead of the status (two devices sending
    /// the same block met it: `ConcurrencyTests`).
    static func answer(_ request: HTTPRequest, _ response: HTTPResponse) -> Route {
        guard request.method == "PATCH", let length = request.contentLength, length > 0, length <= Int64(Blocks.size) else { return .respond(response) }
        return .read(DiscardedBody(reply: response))
    }

    private static func head(_ row: UploadRow, headers: [(String, String)]) -> HTTPResponse {
        .empty(200, headers: headers + [(Tus.uploadOffset, String(row.received)), (Tus.uploadLength, String(row.length)), ("Cache-Control", "no-store")])
    }

    /// Checks a PATCH's headers (the claim is held) and returns the body writer, or an error.
    private static func patch(_ request: HTTPRequest, row: UploadRow, digest: SHA256Digest, hasher: TrailingHasher?, headers: [(String, String)], context: ServerContext) -> Route {
        func fail(_ response: HTTPResponse) -> Route {
            context.uploads.release(row.id, hasher: hasher)
            return answer(request, response.adding(headers))
        }
        guard request.header("Content-Type")?.lowercased().hasPrefix(Tus.offsetContentType) == true else {
            return fail(.error(415, "unsupported_media_type", "a PATCH must have 'Content-Type: \(Tus.offsetContentType)'", field: "Content-Type"))
        }
        let offset: Int64
        do {
            guard let given = try request.byteCount(Tus.uploadOffset, meaning: "the upload's offset in bytes; HEAD the upload to learn it") else {
                return fail(.error(400, "bad_request", "Upload-Offset is missing: a PATCH says where its bytes go; HEAD the upload to learn the offset", field: Tus.uploadOffset))
            }
            offset = given
        } catch {
            return fail(error.response)
        }
        guard offset == row.received else {
            return fail(.error(409, "offset_conflict", "Upload-Offset \(offset) does not match the server's offset \(row.received); resume from \(row.received)",
                               field: Tus.uploadOffset, headers: [(Tus.uploadOffset, String(row.received))]))
        }
        // Compared with what is left, never added to the offset: the client's length may
        // be anything up to Int64.max, and `offset + length` would trap.
        let left = row.length - offset
        if let length = request.contentLength, length > left {
            return fail(.error(413, "body_too_large", "the PATCH declares \(length) bytes but only \(left) are left of this \(row.length)-byte upload; send at most \(left)",
                               field: "Content-Length", headers: [(Tus.uploadOffset, String(row.received))]))
        }
        var checksum: [UInt8]?
        if let text = request.header(Tus.uploadChecksum) {
            guard WirePatterns.matches(WirePatterns.uploadChecksum, text), let value = Base64.decode(String(text.dropFirst("sha256 ".count))), value.count == 32 else {
                return fail(.error(400, "bad_request", "Upload-Checksum must be 'sha256 <base64 of the 32-byte digest>' (see Tus-Checksum-Algorithm)", field: Tus.uploadChecksum))
            }
            checksum = value
        }
        if row.completed {
            hasher?.cancel()
            context.uploads.release(row.id, hasher: nil)
            return answer(request, .empty(204, headers: headers + [(Tus.uploadOffset, String(row.length))]))
        }
        let fd: Int32
        do { fd = try FileIO.open(context.stagingPath(uploadID: row.id), O_RDWR | O_CREAT, 0o600) } catch { return fail(ServerContext.failure(error)) }
        return .read(PatchBody(context: context, upload: row, digest: digest, fd: fd, checksum: checksum, hasher: hasher, headers: headers))
    }
}

extension Tus {
    static func options() -> HTTPResponse {
        .empty(204, headers: [(resumable, API.tusVersion), ("Tus-Version", API.tusVersion), ("Tus-Extension", API.tusExtensions),
                              ("Tus-Checksum-Algorithm", "sha256"), ("Tus-Max-Size", String(Blocks.size))])
    }

    static func unsupportedVersion(_ version: String) -> HTTPResponse {
        .error(412, "precondition_failed", "Tus-Resumable \(version) is not supported; use \(API.tusVersion)", field: resumable,
               headers: [("Tus-Version", API.tusVersion)])
    }
}
