import Crypto
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// Dedup check, download with Range and ETag, and whole-blob PUT (one request, not resumable).
enum BlobHandlers {
    static func present(_ body: PresentRequest, context: ServerContext) -> HTTPResponse {
        guard body.hashes.count <= API.maxHashesPerCheck else {
            return .error(413, "too_many_hashes", "at most \(API.maxHashesPerCheck) hashes per call, got \(body.hashes.count); split the list", field: "hashes")
        }
        var hexes: [String] = []
        hexes.reserveCapacity(body.hashes.count)
        for (i, text) in body.hashes.enumerated() {
            guard let d = SHA256Digest(hex: text) else {
                return .error(400, "bad_request", "hashes.\(i) is not a SHA-256 (64 hex digits)", field: "hashes.\(i)")
            }
            hexes.append(d.hex)
        }
        do {
            let present = try context.metadata.presentHashes(hexes)
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: .bytes(WireJSON.hashList("present", present)))
        }
        catch { return ServerContext.failure(error) }
    }

    static func download(_ request: HTTPRequest, hash: String, context: ServerContext) -> HTTPResponse {
        let digest: SHA256Digest
        do { digest = try Validation.hash(hash) } catch { return ServerContext.failure(error) }
        let size: Int64
        let fd: Int32
        do {
            guard let s = try context.metadata.blobSize(digest.hex) else {
                return .error(404, "not_found", "the workspace has no blob \(digest.hex)")
            }
            size = s
            fd = try context.blobs.open(digest)
        } catch {
            return ServerContext.failure(error)
        }
        let etag = "\"\(digest.hex)\""
        var headers = [("ETag", etag), ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream"),
                       ("Cache-Control", "private, max-age=31536000, immutable")]
        if let inm = request.header("If-None-Match"), inm == "*" || inm.split(separator: ",").contains(where: { $0.trimmingSpaces == etag }) {
            close(fd)
            return .empty(304, headers: headers)
        }
        if let range = request.header("Range"), request.header("If-Range").map({ $0 == etag }) ?? true {
            switch ByteRange.parse(range, size: size) {
            case .none:
                break
            case .unsatisfiable:
                close(fd)
                return .error(416, "range_not_satisfiable", "the Range '\(range)' is outside the blob's \(size) bytes",
                              headers: headers + [("Content-Range", "bytes */\(size)")])
            case .range(let start, let end):
                headers.append(("Content-Range", "bytes \(start)-\(end)/\(size)"))
                return HTTPResponse(status: 206, headers: headers, body: .file(fd: fd, offset: start, length: end - start + 1))
            }
        }
        return HTTPResponse(status: 200, headers: headers, body: .file(fd: fd, offset: 0, length: size))
    }

    /// `PUT /v1/blobs/<hash>`: the whole blob in one request (Content-Length required).
    static func put(_ request: HTTPRequest, hash: String, context: ServerContext) -> Route {
        let digest: SHA256Digest
        do { digest = try Validation.hash(hash) } catch { return .respond(ServerContext.failure(error)) }
        guard let length = request.contentLength, length >= 0 else {
            return .respond(.error(411, "length_required", "PUT of a blob needs Content-Length; for unknown sizes use the tus upload (POST /v1/uploads)"))
        }
        do {
            if let existing = try context.presentBlobSize(digest) {
                if existing != length {
                    return .respond(.error(409, "size_conflict", "the workspace has \(digest.hex) with size \(existing), not \(length)", field: "Content-Length"))
                }
                return .respond(.json(200, CreateUploadResponse(status: CreateUploadResponse.present)))
            }
            let staging = try context.blobs.makeStagingFile()
            return .read(PutBody(context: context, digest: digest, length: length, fd: staging.fd, path: staging.path))
        } catch {
            return .respond(ServerContext.failure(error))
        }
    }
}

/// Streams a whole-blob PUT into a fresh staging file, hashing as it goes.
final class PutBody: RequestBody {
    private let context: ServerContext
    private let digest: SHA256Digest
    private let length: Int64
    private let fd: Int32
    private let path: String
    private let hasher = SHA256Hasher()
    private var position: Int64 = 0
    private var failure: HTTPResponse?

    init(context: ServerContext, digest: SHA256Digest, length: Int64, fd: Int32, path: String) {
        self.context = context; self.digest = digest; self.length = length; self.fd = fd; self.path = path
    }

    func receive(_ chunk: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        do { try FileIO.pwrite(fd, chunk, at: position) } catch { failure = ServerContext.failure(error); return }
        hasher.update(chunk)
        position += Int64(chunk.count)
    }

    func finish() -> HTTPResponse {
        defer { FileIO.close(fd) }
        if let failure {
            _ = unlink(path)
            return failure
        }
        if let result = context.commit(stagingPath: path, fd: fd, digest: digest, length: position, computed: hasher.finish(), uploadID: nil) {
            _ = unlink(path)
            return result
        }
        return .json(201, CreateUploadResponse(status: CreateUploadResponse.present))
    }

    func abort() {
        FileIO.close(fd)
        _ = unlink(path)
    }
}

/// One `bytes=` range (multiple ranges are answered with the whole blob, as RFC 9110 allows).
enum ByteRange: Equatable {
    case none
    case unsatisfiable
    case range(Int64, Int64)

    static func parse(_ header: String, size: Int64) -> ByteRange {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return .none }
        let spec = header.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return .none }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let n = Int64(last), n > 0 else { return .unsatisfiable }
            if size == 0 { return .unsatisfiable }
            return .range(max(0, size - n), size - 1)
        }
        guard let start = Int64(first), start >= 0 else { return .none }
        if start >= size { return .unsatisfiable }
        if last.isEmpty { return .range(start, size - 1) }
        guard let end = Int64(last), end >= start else { return .none }
        return .range(start, min(end, size - 1))
    }
}
