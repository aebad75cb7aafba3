import Crypto
import ObjectStore
import Protocol
import Storage
import Synchronization

/// The blocks of a scaled server, in an S3 bucket as objects `blocks/<sha256>`.
///
/// Devices PUT blocks straight to the store with presigned URLs; the server's CPU never
/// touches their bytes except once, to verify a block before it is recorded (and so
/// offered for dedup). Nothing about an upload is kept in the server process or on its
/// disk: the plan is computed from the records, the URL is signed on the spot, and the
/// verification reads the store. Any process can answer any request. A block the server
/// receives itself (a whole-block PUT, a pack) is held in memory and PUT by the server.
final class ObjectBlocks: BlockStore, PresignedBlocks {
    let store: S3Store

    init(store: S3Store) { self.store = store }

    /// Every block object's key begins with it.
    static let prefix = "blocks/"

    static func key(_ digest: SHA256Digest) -> String { prefix + digest.hex }

    /// Checks that the bucket answers to our credentials, and creates it when it does not exist.
    func prepare() throws(ObjectStoreError) {
        try store.createBucket()
    }

    var presigned: (any PresignedBlocks)? { self }

    func holds(_ digest: SHA256Digest) throws -> Bool { try store.head(Self.key(digest)) != nil }

    /// A HEAD of each object, several at once.
    func firstLacking(_ digests: [SHA256Digest]) throws -> SHA256Digest? {
        let lacking = Mutex<[Int]>([])
        try Concurrently.run(digests.count, width: ObjectPackStaging.width) { i in
            if try !self.holds(digests[i]) { lacking.withLock { $0.append(i) } }
        }
        return lacking.withLock { $0.min() }.map { digests[$0] }
    }

    func read(_ digest: SHA256Digest, _ consumer: @escaping (UnsafeRawBufferPointer) -> Void) throws -> Int64? {
        try store.read(Self.key(digest), consumer)
    }

    /// The whole block, fetched into memory (at most 4 MiB).
    func open(_ digest: SHA256Digest, length: Int) -> OpenBlock? {
        guard let bytes = try? self.bytes(digest), bytes.count == length else { return nil }
        return .bytes(bytes)
    }

    func file(_ digest: SHA256Digest) -> (fd: Int32, start: Int64)? { nil }

    /// Several server processes share a bucket: nothing to take.
    func takeForServing() {}

    /// Fetched ahead of the reply (`ObjectPrefetch`).
    func feed(_ records: [PackRecord]) -> any BlockFeed { ObjectPrefetch(records, objects: self) }

    /// Read into memory (a block is at most 4 MiB) and PUT; the staging file goes.
    func adopt(stagingPath: String, fd: Int32, as digest: SHA256Digest) throws {
        var bytes: [UInt8] = []
        _ = try FileIO.stream(fd) { bytes.append(contentsOf: $0) }
        try put(digest, bytes: bytes)
        try? FileIO.unlink(stagingPath)
    }

    func remove(_ digest: SHA256Digest) throws { try store.delete(Self.key(digest)) }

    /// None: an object no row names is a device's PUT not yet verified, and only
    /// `verify` records it.
    func unrecorded(_ digest: SHA256Digest) -> Int64? { nil }

    /// Held in memory, checked, PUT and recorded: nothing touches the server's disk.
    func putBody(_ digest: SHA256Digest, length: Int64, context: ServerContext) -> any RequestBody {
        ObjectPutBody(context: context, objects: self, digest: digest, length: length)
    }

    func packStaging(context: ServerContext) -> any PackStaging { ObjectPackStaging(context: context, objects: self) }

    /// The presigned PUT of one missing block, as the upload plan lists it. The URL
    /// signs the block's length and its SHA-256 (`x-amz-checksum-sha256`), so the store
    /// itself refuses other bytes; the server verifies again before recording it.
    func plan(_ block: ServerContext.NeededBlock, expiresIn: Int64) -> (info: BlockUploadInfo, expires: Int64) {
        let put = store.presignPut(Self.key(block.digest), length: block.length, sha256: block.digest, expiresIn: expiresIn)
        let headers = Dictionary(uniqueKeysWithValues: put.headers.filter { $0.0 != "content-length" })
        return (BlockUploadInfo(index: block.index, hash: block.digest.hex, length: block.length, url: put.url, offset: 0,
                                kind: BlockUploadInfo.s3, headers: headers), put.expires)
    }

    /// Reads the object of `digest` once and checks its SHA-256 against the name (the one
    /// read of block bytes the server does). A mismatch (or a size no block has) deletes
    /// the object, so the hash never becomes present from it.
    func verify(_ digest: SHA256Digest) throws -> BlockVerdict {
        let hasher = SHA256Hasher()
        guard let size = try store.read(Self.key(digest), { hasher.update($0) }) else { return .absent }
        let actual = hasher.finish()
        if actual == digest, size > 0, size <= Int64(Blocks.size) { return .verified(size: size) }
        try store.delete(Self.key(digest))
        return .mismatch(actual: actual, size: size)
    }

    /// A presigned GET of a stored block, where a download is redirected (the device
    /// sends its `Range` there; the server sends no block bytes).
    func downloadURL(_ digest: SHA256Digest, expiresIn: Int64) -> String {
        store.presignGet(Self.key(digest), expiresIn: expiresIn).url
    }

    /// A page of the bucket's block objects (1,000 keys); a key that is not exactly
    /// `blocks/<sha256>` is no block and is left out.
    func page(after: String?) throws -> (blocks: [ListedBlock], more: Bool, next: String?) {
        let page = try store.listObjects(prefix: Self.prefix, startAfter: after)
        let blocks = page.objects.compactMap { object -> ListedBlock? in
            guard let digest = SHA256Digest(hex: String(object.key.dropFirst(Self.prefix.count))), Self.key(digest) == object.key else { return nil }
            return ListedBlock(digest: digest, size: object.size, modified: object.modified)
        }
        return (blocks, page.more, page.objects.last?.key)
    }

    /// The whole block, read into memory (at most 4 MiB): for a content assembled by the server.
    func bytes(_ digest: SHA256Digest) throws(ObjectStoreError) -> [UInt8]? {
        let box = ByteBox()
        box.bytes.reserveCapacity(Blocks.size)
        guard try store.read(Self.key(digest), { box.bytes.append(contentsOf: $0) }) != nil else { return nil }
        return box.bytes
    }

    /// Stores a whole block the server received itself (`PUT /v1/blocks/<hash>`), already
    /// checked against its hash; the store checks it again (the digest is the signed payload hash).
    func put(_ digest: SHA256Digest, bytes: [UInt8]) throws(ObjectStoreError) {
        let result: Result<Void, ObjectStoreError> = bytes.withUnsafeBytes { raw in
            do throws(ObjectStoreError) { try store.put(Self.key(digest), bytes: raw, sha256: digest); return .success(()) } catch { return .failure(error) }
        }
        try result.get()
    }
}

/// `@unchecked Sendable`: filled by the one thread running the transfer.
private final class ByteBox: @unchecked Sendable { var bytes: [UInt8] = [] }

extension ObjectStoreError {
    /// The reply when the store failed: 503, try again (the store is down or restarting).
    var response: HTTPResponse {
        .error(503, "store_unavailable", "the server's object store failed (request id \(ServerLog.failure(self))); try again shortly", headers: [("Retry-After", "5")])
    }
}
