import Crypto
import Protocol
import Storage

/// Turns a request's method and path into a handler; checks the bearer token for
/// every call but health, the OpenAPI document, tus OPTIONS and presigned transfers.
final class Router: HTTPHandler {
    let context: ServerContext
    init(context: ServerContext) { self.context = context }

    func route(_ request: HTTPRequest) -> Route { context.admitting(request, dispatch(request)) }

    private func dispatch(_ request: HTTPRequest) -> Route {
        let path = request.path
        let method = request.method
        // Before anything reads a header: the body's length is known and fits an Int64.
        if let refusal = request.framingRefusal() { return .respond(refusal) }
        if let refusal = Methods.refusal(method, on: path) { return .respond(refusal) }

        switch (method, path) {
        case ("GET", API.health), ("HEAD", API.health):
            return .respond(.json(200, HealthResponse(status: "ok", version: serverVersion, time: ServerContext.now())))
        case ("GET", API.openAPI):
            return .respond(HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: .bytes(Array(OpenAPI.document.utf8))))
        case ("GET", API.metrics):
            return .respond(context.metrics.answer(request))
        default: break
        }

        if path == API.tus || path.hasPrefix(API.tusPrefix) {
            if path == API.tus {
                if method == "OPTIONS" { return .respond(Tus.options()) }
                return authenticated(request) { TusHandlers.create(request, device: $0, context: self.context) }
            }
            let id = String(path.dropFirst(API.tusPrefix.count))
            return TusHandlers.resource(request, id: id, context: context)
        }

        switch (method, path) {
        case ("POST", API.presentContents):
            return authenticated(request) { _ in json(request, Declared<PresentRequest>.self) { ContentHandlers.present($0.value, context: self.context) } }
        case ("POST", API.uploads):
            return authenticated(request) { device in
                json(request, CreateUploadRequest.self, limit: API.maxManifestBody) { UploadHandlers.create($0, request: request, device: device, context: self.context) }
            }
        case ("POST", API.files):
            return authenticated(request) { device in
                json(request, Declared<FileRecord>.self, limit: API.maxManifestBody) { FileHandlers.record($0.value, device: device, context: self.context) }
            }
        case ("GET", API.files):
            return authenticated(request) { _ in .respond(FileHandlers.list(request, context: self.context)) }
        // Per-device versions (restore-server branch).
        case ("GET", API.fileVersions):
            return authenticated(request) { _ in .respond(FileHandlers.versions(request, context: self.context)) }
        case ("GET", API.changes):
            return authenticated(request) { _ in FileHandlers.changes(request, context: self.context) }
        case ("GET", API.watermark):
            return authenticated(request) { device in .respond(FileHandlers.watermark(device: device, context: self.context)) }
        case ("PUT", API.watermark):
            return authenticated(request) { device in json(request, Declared<Watermark>.self) { FileHandlers.setWatermark($0.value, device: device, context: self.context) } }
        case ("GET", API.tree):
            return authenticated(request) { _ in TreeHandlers.page(request, context: self.context) }
        case ("POST", API.treeChanges):
            // A put may carry a block list, as a file record does.
            return authenticated(request) { device in
                json(request, TreeChangesRequest.self, limit: API.maxManifestBody) { TreeHandlers.apply($0, device: device, context: self.context) }
            }
        case ("GET", API.treeTrash):
            return authenticated(request) { _ in .respond(TreeHandlers.trash(request, context: self.context)) }
        case ("POST", API.blockPack):
            return authenticated(request) { _ in BlockPackUpload.start(request, context: self.context) }
        case ("POST", API.blockPackFetch):
            return authenticated(request) { _ in json(request, Declared<BlockPackRequest>.self) { BlockPackFetch.answer($0.value, context: self.context) } }
        case ("POST", API.treeRestore):
            return authenticated(request) { device in json(request, TreeRestoreRequest.self) { TreeHandlers.restore($0, device: device, context: self.context) } }
        default: break
        }

        if path.hasPrefix(API.treeNodePrefix), path.hasSuffix(API.versionsSuffix) {
            let id = String(path.dropFirst(API.treeNodePrefix.count).dropLast(API.versionsSuffix.count))
            return authenticated(request) { _ in .respond(TreeHandlers.versions(id: id, context: self.context)) }
        }

        if path.hasPrefix(API.contentPrefix) {
            let rest = String(path.dropFirst(API.contentPrefix.count))
            if rest.hasSuffix(API.blocksSuffix) {
                let hashText = String(rest.dropLast(API.blocksSuffix.count))
                return authenticated(request) { _ in .respond(ContentHandlers.blocks(hash: hashText, context: self.context)) }
            }
            return authenticated(request) { _ in .respond(DownloadHandlers.content(request, hash: rest, context: self.context)) }
        }
        if path.hasPrefix(API.blockPrefix) {
            let hashText = String(path.dropFirst(API.blockPrefix.count))
            if hashText.hasSuffix(API.chunksSuffix) {
                let blockHash = String(hashText.dropLast(API.chunksSuffix.count))
                return authenticated(request) { _ in .respond(BlockChunks.handle(hash: blockHash, context: self.context)) }
            }
            if hashText.hasSuffix(API.verifySuffix) {
                let hash = String(hashText.dropLast(API.verifySuffix.count))
                return authenticated(request) { _ in .respond(BlockVerify.verify(hash: hash, context: self.context)) }
            }
            if method == "PUT" { return authenticated(request) { _ in BlockPut.put(request, hash: hashText, context: self.context) } }
            return authenticated(request) { _ in .respond(DownloadHandlers.block(request, hash: hashText, context: self.context)) }
        }
        return .respond(.error(404, "not_found", "no such endpoint: \(method) \(path); see GET /v1/openapi.json"))
    }

    /// Runs `body` with the device whose bearer token the request carries; 401 otherwise.
    private func authenticated(_ request: HTTPRequest, _ body: (Metadata.Device) -> Route) -> Route {
        let challenge = [("WWW-Authenticate", "Bearer realm=\"vdrive\"")]
        guard let value = request.header("Authorization") else {
            return .respond(.error(401, "unauthorized", "missing 'Authorization: Bearer <device token>'; make one with 'vdrive serve device add NAME'", headers: challenge))
        }
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            return .respond(.error(401, "unauthorized", "the Authorization header must be 'Bearer <device token>'", headers: challenge))
        }
        let device: Metadata.Device?
        do { device = try context.metadata.device(token: String(parts[1])) } catch { return .respond(ServerContext.failure(error)) }
        guard let device else {
            return .respond(.error(401, "unauthorized", "the device token is unknown or revoked; make a new one with 'vdrive serve device add NAME'", headers: challenge))
        }
        if let refusal = Revocation.refusal(device, challenge: challenge) { return .respond(refusal) }
        request.note.device = device.name
        return body(device)
    }
}

let serverVersion = "0.1.0"

/// Reads a bounded JSON body, decodes `T` and hands it to `handle`. Bodies declared
/// larger than `limit` (`API.maxJSONBody`; block lists may be `API.maxManifestBody`)
/// are refused before a byte of them is read.
func json<T: Decodable>(_ request: HTTPRequest, _ type: T.Type, limit: Int = API.maxJSONBody, _ handle: @escaping (T) -> HTTPResponse) -> Route {
    if let length = request.contentLength, length > Int64(limit) {
        return .respond(.error(413, "body_too_large", "the JSON body (\(length) bytes) is larger than \(limit) bytes; send fewer items per call"))
    }
    return .read(BufferedBody(limit: limit) { bytes in
        let value: T
        do { value = try WireJSON.decode(T.self, from: bytes) } catch {
            let (field, message) = WireJSON.describe(error, body: bytes)
            return .error(400, "bad_request", message, field: field)
        }
        return handle(value)
    })
}

extension ServerContext {
    /// Maps an unexpected error to a reply: disk full is 507 (try again once space is
    /// freed), records out of reach 503, anything else 500. The error's own text (SQL,
    /// paths, host names, libpq's words) is logged under a request id and only the id is
    /// answered: the caller may be anyone holding a URL.
    static func failure(_ error: Error) -> HTTPResponse {
        if let e = error as? DatabaseError, e.isDiskFull { return diskFull() }
        if let e = error as? Errno, e == .noSpace || e == .quotaExceeded { return diskFull() }
        if let e = error as? ValidationError { return .error(e.status, e.code, e.message, field: e.field) }
        if let e = error as? RequestFailure { return e.response }
        if let e = error as? BlockBeingRemoved { return .error(503, "unavailable", e.description, headers: [("Retry-After", "1")]) }
        let id = ServerLog.failure(error)
        if error is RecordsUnavailable {
            return .error(503, "unavailable", "the server's records are unavailable right now; try again in a few seconds (request id \(id))", headers: [("Retry-After", "2")])
        }
        return .error(500, "internal", "the server failed (request id \(id)); its operator finds the cause in the server's log under that id")
    }

    static func diskFull() -> HTTPResponse {
        .error(507, "insufficient_storage", "the server's disk is full; free space on the server, then resume the upload (HEAD gives the offset)")
    }
}
