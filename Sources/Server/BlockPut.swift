import Crypto
import ObjectStore
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `PUT /v1/blocks/<hash>`: one whole block in one request (Content-Length required, at
/// most `Blocks.size`), not resumable; for scripts and `curl -T`. The bytes are checked
/// against the hash before the block enters the store, as a tus upload's are.
enum BlockPut {
    static func put(_ request: HTTPRequest, hash: String, context: ServerContext) -> Route {
        let digest: SHA256Digest
        do { digest = try Validation.hash(hash) } catch { return .respond(ServerContext.failure(error)) }
        guard let length = request.contentLength, length >= 0 else {
            return .respond(.error(411, "length_required", "PUT of a block needs Content-Length; or use the tus upload (POST /v1/uploads)"))
        }
        guard length > 0 && length <= Int64(Blocks.size) else {
            return .respond(.error(length > 0 ? 413 : 400, length > 0 ? "body_too_large" : "bad_request",
                                   "a block has 1 to \(Blocks.size) bytes (4 MiB), not \(length): cut the file into 4 MiB blocks (Docs/protocol.md)",
                                   field: "Content-Length", headers: [("Tus-Max-Size", String(Blocks.size))]))
        }
        guard !Blocks.isZero(digest, length: Int(length)) else {
            return .respond(.error(400, "bad_request", "block \(digest.hex) is \(length) zero bytes: zero blocks are never stored or sent, they count as present"))
        }
        do {
            if let existing = try context.presentBlockSize(digest) {
                if existing != length {
                    return .respond(.error(409, "size_conflict", "the workspace has block \(digest.hex) with \(existing) bytes, not \(length)", field: "Content-Length"))
                }
                return .respond(.json(200, CreateUploadResponse(status: CreateUploadResponse.present)))
            }
            try context.checkQuota(adding: length)
            return .read(try context.blocks.putBody(digest, length: length, context: context))
        } catch {
            return .respond(ServerContext.failure(error))
        }
    }
}

/// Streams a whole-block PUT into a fresh staging file of the folder store, hashing as it goes.
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
        if position + Int64(chunk.count) > length {
            failure = .error(413, "body_too_large", "the body is longer than its Content-Length \(length)")
            return
        }
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

/// A whole-block PUT to a server keeping blocks in an object store: the block (at most
/// 4 MiB) is held in memory, checked against its hash, then stored with a signed PUT and
/// recorded. Nothing touches the server's disk, so any server process can take it.
final class ObjectPutBody: RequestBody {
    private let context: ServerContext
    private let objects: ObjectBlocks
    private let digest: SHA256Digest
    let length: Int64
    private var bytes: [UInt8] = []
    private var tooLong = false

    init(context: ServerContext, objects: ObjectBlocks, digest: SHA256Digest, length: Int64) {
        self.context = context; self.objects = objects; self.digest = digest; self.length = length
        bytes.reserveCapacity(Int(length))
    }

    func receive(_ chunk: UnsafeRawBufferPointer) {
        guard !tooLong else { return }
        if Int64(bytes.count + chunk.count) > length { tooLong = true; return }
        bytes.append(contentsOf: chunk)
    }

    func finish() -> HTTPResponse {
        if tooLong { return .error(413, "body_too_large", "the body is longer than its Content-Length \(length)") }
        let actual = SHA256Hasher.digest(bytes)
        guard actual == digest, Int64(bytes.count) == length else {
            return .error(Tus.checksumMismatchStatus, "block_checksum_mismatch",
                          "the \(bytes.count) bytes sent hash to \(actual.hex), not \(digest.hex); nothing was stored")
        }
        do {
            try objects.put(digest, bytes: bytes)
            try context.recordBlock(digest, size: length, uploadID: nil)
        } catch let error as ObjectStoreError {
            return error.response
        } catch {
            return ServerContext.failure(error)
        }
        return .json(201, CreateUploadResponse(status: CreateUploadResponse.present))
    }

    func abort() { bytes = [] }
}
