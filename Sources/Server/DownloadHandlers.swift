import Crypto
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `GET|HEAD /v1/contents/<hash>` (a whole file, assembled from its blocks) and
/// `GET|HEAD /v1/blocks/<hash>` (one stored block), both with one `Range`, an ETag
/// (the quoted hash: content is immutable), `If-None-Match` and `If-Range`.
enum DownloadHandlers {
    static func content(_ request: HTTPRequest, hash: String, context: ServerContext) -> HTTPResponse {
        do {
            let digest = try Validation.hash(hash)
            guard let manifest = try context.metadata.manifest(digest) else {
                return .error(404, "not_found", "the workspace has no content \(digest.hex)")
            }
            return try respond(request, etag: digest.hex, size: manifest.size) { start, length in
                // A range inside one stored block is sent straight from its file (sendfile)
                // where the store keeps files; otherwise assembled, one block at a time.
                let index = Int(start / Int64(Blocks.size))
                let within = start - Int64(index) * Int64(Blocks.size)
                if length > 0, within + length <= Int64(manifest.length(ofBlock: index)), !manifest.isZero(index),
                   let file = try context.blocks.file(manifest.blocks[index]) {
                    return .file(fd: file.fd, offset: file.start + within, length: length)
                }
                return .stream(length: length, reader: OffsetReader(ContentReader(manifest: manifest, store: context.blocks), start: start))
            }
        } catch {
            return ServerContext.failure(error)
        }
    }

    static func block(_ request: HTTPRequest, hash: String, context: ServerContext) -> HTTPResponse {
        do {
            let digest = try Validation.hash(hash)
            guard let size = try context.metadata.blockSize(digest.hex) else {
                return .error(404, "not_found", "the workspace has no block \(digest.hex) (zero blocks are never stored: they are \(Blocks.size) or fewer zero bytes)")
            }
            if let presigned = context.blocks.presigned {
                return redirect(request, etag: digest.hex, to: presigned.downloadURL(digest, expiresIn: min(context.configuration.uploadExpiry, 3600)))
            }
            return try respond(request, etag: digest.hex, size: size) { start, length in
                if let file = try context.blocks.file(digest) { return .file(fd: file.fd, offset: file.start + start, length: length) }
                let block = BlockManifest(content: digest, size: size, blocks: [digest])
                return .stream(length: length, reader: OffsetReader(ContentReader(manifest: block, store: context.blocks), start: start))
            }
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// A block of a store devices reach themselves is sent by the store: 307 to a presigned GET
    /// (the device sends its `Range` there, and no bearer token). 304 still comes from here.
    private static func redirect(_ request: HTTPRequest, etag hex: String, to url: String) -> HTTPResponse {
        let etag = "\"\(hex)\""
        if let inm = request.header("If-None-Match"), inm == "*" || inm.split(separator: ",").contains(where: { $0.trimmingSpaces == etag }) {
            return .empty(304, headers: [("ETag", etag)])
        }
        return .empty(307, headers: [("Location", url), ("ETag", etag), ("Cache-Control", "no-store")])
    }

    /// The conditional and range logic shared by both: `body` makes the bytes from
    /// `start`, `length` long.
    private static func respond(_ request: HTTPRequest, etag hex: String, size: Int64,
                                body: (_ start: Int64, _ length: Int64) throws -> HTTPResponse.Body) throws -> HTTPResponse {
        let etag = "\"\(hex)\""
        var headers = [("ETag", etag), ("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream"),
                       ("Cache-Control", "private, max-age=31536000, immutable")]
        if let inm = request.header("If-None-Match"), inm == "*" || inm.split(separator: ",").contains(where: { $0.trimmingSpaces == etag }) {
            return .empty(304, headers: headers)
        }
        if let range = request.header("Range"), request.header("If-Range").map({ $0 == etag }) ?? true {
            switch ByteRange.parse(range, size: size) {
            case .none:
                break
            case .unsatisfiable:
                return .error(416, "range_not_satisfiable", "the Range '\(range)' is outside the \(size) bytes",
                              headers: headers + [("Content-Range", "bytes */\(size)")])
            case .range(let start, let end):
                headers.append(("Content-Range", "bytes \(start)-\(end)/\(size)"))
                return HTTPResponse(status: 206, headers: headers, body: try body(start, end - start + 1))
            }
        }
        if size == 0 { return HTTPResponse(status: 200, headers: headers, body: .bytes([])) }
        return HTTPResponse(status: 200, headers: headers, body: try body(0, size))
    }
}

/// A reader whose positions start at `start` of another (libmicrohttpd counts from 0).
/// `@unchecked Sendable`: as its inner reader, used by one connection's thread.
final class OffsetReader: BodyReader, @unchecked Sendable {
    private let inner: any BodyReader
    private let start: Int64
    init(_ inner: any BodyReader, start: Int64) { self.inner = inner; self.start = start }
    func read(at position: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int? { inner.read(at: start + position, into: buffer) }
    func close() { inner.close() }
}
