import Crypto
import Protocol
#if canImport(Glibc)
import Glibc
#endif

/// Counts the bytes a download wrote (used on the transfer's thread only).
private final class ByteCounter: @unchecked Sendable { // touched only by the calling thread during perform
    var count: Int64 = 0
}

/// The answer to "create upload" for a content.
public enum ContentUpload: Sendable, Equatable {
    /// The workspace already has the content: record the file, send nothing.
    case present
    /// Send these blocks (each a tus upload; none when every block is there), then
    /// record the file with its block list. After `expiresAt` (Unix seconds) ask
    /// `createUpload` again for fresh URLs.
    case blocks([BlockTicket], expiresAt: Int64)
}

/// One block the server lacks: send bytes `[offset, length)` of it to `url` (absolute,
/// presigned, needs no token). `index` is its position in the file.
public struct BlockTicket: Sendable, Equatable {
    public var index: Int
    public var hash: SHA256Digest
    public var length: Int64
    public var url: String
    public var offset: Int64
    /// How to send it: tus PATCHes (embedded store) or one presigned S3 PUT (scaled store).
    public var kind: UploadKind
    public init(index: Int, hash: SHA256Digest, length: Int64, url: String, offset: Int64, kind: UploadKind = .tus) {
        self.index = index; self.hash = hash; self.length = length; self.url = url; self.offset = offset; self.kind = kind
    }

    /// Where the block starts in its file.
    public var fileOffset: Int64 { Int64(index) * Int64(Blocks.size) }
}

/// Every call of the workspace API (Docs/protocol.md), synchronous, over one kept-alive connection.
public final class WorkspaceClient: Sendable {
    public let baseURL: String
    private let token: String
    public let connection: HTTPConnection

    /// Why the token must not be sent to `baseURL` (plain HTTP to another machine), nil when it may.
    private let tokenRefusal: String?

    /// `baseURL` such as `http://127.0.0.1:8420` (no trailing slash needed); `token` is the device token.
    /// `caFile`: the CAs to trust for every request (the server and, on a scaled server, its
    /// object store), nil for the system's. `allowInsecureHTTP`: send the token over plain
    /// HTTP to a machine other than this one (refused otherwise, before any connection).
    public init(baseURL: String, token: String, timeouts: Timeouts = Timeouts(), caFile: String? = nil, allowInsecureHTTP: Bool = false) {
        var base = baseURL
        while base.hasSuffix("/") { base.removeLast() }
        self.baseURL = base
        self.token = token
        self.connection = HTTPConnection(timeouts: timeouts, caFile: caFile)
        self.tokenRefusal = allowInsecureHTTP ? nil : PlainHTTP.refusal(baseURL: base)
    }

    // MARK: calls

    public func health() throws(ClientError) -> HealthResponse {
        try decode(HealthResponse.self, call("GET", API.health, auth: false))
    }

    /// Which of the content hashes the workspace has (whole-file dedup). Sends at most 10,000 per request.
    public func presentContents(_ hashes: [SHA256Digest]) throws(ClientError) -> Set<SHA256Digest> {
        var out = Set<SHA256Digest>()
        var start = 0
        while start < hashes.count {
            let slice = hashes[start..<min(hashes.count, start + API.maxHashesPerCheck)]
            let body = WireJSON.hashList("hashes", slice.map(\.hex))
            let reply = try decode(PresentResponse.self, call("POST", API.presentContents, body: body))
            for hex in reply.present {
                guard let d = SHA256Digest(hex: hex) else { throw .invalidResponse("'\(hex)' in 'present' is not a hash") }
                out.insert(d)
            }
            start += API.maxHashesPerCheck
        }
        return out
    }

    /// Asks for the upload plan of a content: `.present`, or the blocks the server lacks
    /// with their uploads. Idempotent: the same block gives the same upload and its
    /// current offset (a resumed block goes on where the server is).
    public func createUpload(content: SHA256Digest, size: Int64, blocks: [SHA256Digest]) throws(ClientError) -> ContentUpload {
        let request = CreateUploadRequest(content: content.hex, size: size, blocks: blocks.map(\.hex))
        let reply = try decode(CreateUploadResponse.self, call("POST", API.uploads, json: request))
        if reply.status == CreateUploadResponse.present { return .present }
        guard reply.status == CreateUploadResponse.upload, let list = reply.blocks, let expires = reply.expiresAt else {
            throw .invalidResponse("create upload answered status '\(reply.status)' without blocks/expiresAt")
        }
        var tickets: [BlockTicket] = []
        for b in list {
            guard let hash = SHA256Digest(hex: b.hash), b.index >= 0, b.index < blocks.count, blocks[b.index] == hash else {
                throw .invalidResponse("create upload listed block \(b.index) as '\(b.hash)', which is not that block of this content")
            }
            tickets.append(BlockTicket(index: b.index, hash: hash, length: b.length, url: b.url, offset: b.offset, kind: try UploadKind(b)))
        }
        return .blocks(tickets, expiresAt: expires)
    }

    /// The server's offset of an upload (tus HEAD). Trust this, not a local record, after a restart.
    public func uploadOffset(url: String) throws(ClientError) -> Int64 {
        let reply = try connection.perform(method: "HEAD", url: url, headers: [tusHeader])
        try check(reply, expect: [200])
        guard let text = reply.header(Tus.uploadOffset), let offset = Int64(text) else {
            throw .invalidResponse("HEAD of the upload has no Upload-Offset")
        }
        return offset
    }

    /// Sends `length` bytes of `fd` from `fileOffset` as one tus PATCH at upload offset `offset`,
    /// with `Upload-Checksum: sha256` of exactly those bytes (read from the descriptor first,
    /// in 1 MiB pieces) unless `checksum` is false. Memory stays constant whatever the length. `progress` gets the bytes
    /// of this chunk sent so far and returns false to cancel. Returns the server's new offset.
    public func patch(url: String, offset: Int64, fd: Int32, fileOffset: Int64, length: Int64, checksum: Bool = true,
                      progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> Int64 {
        let digest = checksum ? try Self.hash(fd: fd, offset: fileOffset, length: length) : nil
        return try send(url: url, offset: offset, fd: fd, fileOffset: fileOffset, length: length, digest: digest, progress: progress)
    }

    /// One PATCH with a checksum computed beforehand (or none).
    private func send(url: String, offset: Int64, fd: Int32, fileOffset: Int64, length: Int64, digest: SHA256Digest?,
                      progress: ((Int64) -> Bool)?) throws(ClientError) -> Int64 {
        var headers = patchHeaders(offset: offset)
        if let digest { headers.append("\(Tus.uploadChecksum): \(Tus.checksumHeader(digest.bytes))") }
        let reply = try connection.perform(method: "PATCH", url: url, headers: headers,
                                           body: .file(fd: fd, offset: fileOffset, length: length), progress: progress)
        try check(reply, expect: [204, 200])
        guard let text = reply.header(Tus.uploadOffset), let newOffset = Int64(text) else {
            throw .invalidResponse("PATCH reply has no Upload-Offset")
        }
        return newOffset
    }

    /// Sends `bytes` as one tus PATCH at `offset`, with `checksum` (the caller's SHA-256 of
    /// exactly these bytes) as `Upload-Checksum`. For callers that already read and hashed
    /// the chunk (the backup uploader reads each file once). Returns the server's new offset.
    public func patch(url: String, offset: Int64, bytes: UnsafeRawBufferPointer, checksum: SHA256Digest,
                      progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> Int64 {
        var headers = patchHeaders(offset: offset)
        headers.append("\(Tus.uploadChecksum): \(Tus.checksumHeader(checksum.bytes))")
        let reply = try connection.perform(method: "PATCH", url: url, headers: headers, bytes: bytes, progress: progress)
        try check(reply, expect: [204, 200])
        guard let text = reply.header(Tus.uploadOffset), let newOffset = Int64(text) else {
            throw .invalidResponse("PATCH reply has no Upload-Offset")
        }
        return newOffset
    }

    /// Ends an upload (tus termination): the server drops its bytes.
    public func terminate(url: String) throws(ClientError) {
        let reply = try connection.perform(method: "DELETE", url: url, headers: [tusHeader])
        try check(reply, expect: [204])
    }

    /// Sends one block of the file `fd` (at `ticket.fileOffset`) from the server's offset
    /// in PATCHes of `chunkSize`, resuming on offset conflicts. A PATCH of the whole block
    /// carries the block's own hash as its `Upload-Checksum` (nothing to hash); a partial
    /// one hashes its bytes first. Throws `.expired` when the URL must be renewed
    /// (`createUpload` again). `progress` gets the block's bytes on the server so far.
    public func uploadBlock(_ ticket: BlockTicket, fd: Int32, chunkSize: Int64 = Int64(Blocks.size), checksum: Bool = true,
                            progress: ((Int64) -> Bool)? = nil) throws(ClientError) {
        if case .s3(let headers) = ticket.kind {
            return try putBlock(url: ticket.url, hash: ticket.hash, headers: headers,
                                body: .file(fd: fd, offset: ticket.fileOffset, length: ticket.length), progress: progress)
        }
        var offset = ticket.offset
        var conflicts = 0
        while offset < ticket.length {
            let base = offset
            let length = min(chunkSize, ticket.length - offset)
            do {
                var digest: SHA256Digest?
                if checksum {
                    digest = offset == 0 && length == ticket.length ? ticket.hash
                        : try Self.hash(fd: fd, offset: ticket.fileOffset + offset, length: length)
                }
                offset = try send(url: ticket.url, offset: offset, fd: fd, fileOffset: ticket.fileOffset + offset, length: length, digest: digest,
                                  progress: progress.map { p in { p(base + $0) } })
            } catch .offsetConflict(let server) {
                conflicts += 1
                if conflicts > 1000 { throw .offsetConflict(serverOffset: server) }
                if server == offset { usleep(20_000) }  // another request is writing this upload
                if let server { offset = server } else { offset = try uploadOffset(url: ticket.url) }
            }
        }
    }

    /// Uploads a file for tests and benchmarks: reads it once to compute its blocks and
    /// content hash (`ContentHasher`) unless `manifest` is given, asks for the plan, sends
    /// the missing blocks (renewing expired URLs), and returns the manifest to record
    /// with `recordFile`. `progress` gets the file offset reached in the block being sent.
    @discardableResult
    public func uploadFile(fd: Int32, size: Int64, manifest known: BlockManifest? = nil, chunkSize: Int64 = Int64(Blocks.size),
                           checksum: Bool = true, progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> BlockManifest {
        let manifest: BlockManifest
        if let known { manifest = known } else { manifest = try Self.manifest(fd: fd, size: size) }
        var renewals = 0
        while true {
            guard case .blocks(let tickets, _) = try createUpload(content: manifest.content, size: size, blocks: manifest.blocks) else { return manifest }
            do {
                for ticket in tickets {
                    try uploadBlock(ticket, fd: fd, chunkSize: chunkSize, checksum: checksum,
                                    progress: progress.map { p in { p(ticket.fileOffset + $0) } })
                }
                return manifest
            } catch .expired where renewals < 3 {
                renewals += 1
            }
        }
    }

    /// The blocks and content hash of `size` bytes of `fd`, read once in 1 MiB pieces.
    public static func manifest(fd: Int32, size: Int64) throws(ClientError) -> BlockManifest {
        let hasher = ContentHasher()
        try readOnce(fd: fd, offset: 0, length: size) { hasher.update($0) }
        let (content, blocks) = hasher.finish()
        return BlockManifest(content: content, size: size, blocks: blocks)
    }

    /// Feeds `length` bytes of `fd` from `offset` to `body` in 1 MiB pieces, read once.
    private static func readOnce(fd: Int32, offset: Int64, length: Int64,
                                 _ body: (UnsafeRawBufferPointer) -> Void) throws(ClientError) {
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            let want = Int(min(Int64(chunk), length - done))
            let n = pread(fd, buffer.baseAddress, want, off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw .localIO("reading the file to hash it failed: \(String(cString: strerror(errno)))") }
            if n == 0 { throw .localIO("the file is shorter than \(offset + length) bytes (it changed while it was read?)") }
            body(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            done += Int64(n)
        }
    }

    /// Records `path → content` (idempotent); returns the stored record with its server
    /// sequence. A content the server does not hold yet needs `record.blocks`; a block it
    /// lacks gives `.missingBlocks` (upload them, then record again).
    @discardableResult
    public func recordFile(_ record: FileRecord) throws(ClientError) -> FileRecord {
        try decode(FileRecord.self, call("POST", API.files, json: record))
    }

    /// The current version of each (device, path) under a path prefix (`""` for all),
    /// one device's (`device`) or every device's, sorted by device then path; fetched
    /// `pageSize` at a time. Holds them all in memory: `filesPage` streams instead.
    public func listFiles(device: String? = nil, prefix: String, pageSize: Int = API.maxListPage) throws(ClientError) -> [FileRecord] {
        var out: [FileRecord] = []
        var after: String?
        repeat {
            let page = try filesPage(device: device, prefix: prefix, after: after, limit: pageSize)
            out += page.files
            after = page.next
        } while after != nil
        return out
    }

    /// One page of `listFiles`: pass its `next` as `after` for the following page (nil
    /// on the last). Without `device`, `after`/`next` are `DEVICE/PATH`.
    public func filesPage(device: String? = nil, prefix: String, after: String? = nil, limit: Int = API.maxListPage) throws(ClientError) -> FileListResponse {
        var query = API.files + "?prefix=" + Self.percentEncode(prefix) + "&limit=\(limit)"
        if let device { query += "&device=" + Self.percentEncode(device) }
        if let after { query += "&after=" + Self.percentEncode(after) }
        return try decode(FileListResponse.self, call("GET", query))
    }

    /// Every version of `device`'s `path`, oldest first (the last is the current one);
    /// each is downloadable by its `hash` (`download(content:)`, `contentBlocks`).
    /// `.notFound` when the device never recorded that path.
    public func fileVersions(device: String, path: String) throws(ClientError) -> [FileRecord] {
        let query = API.fileVersions + "?device=" + Self.percentEncode(device) + "&path=" + Self.percentEncode(path)
        return try decode(FileVersionsResponse.self, call("GET", query)).versions
    }

    /// Records changed after server sequence `since`; pass `nextSequence` next time.
    /// `wait` (0 to `API.maxChangesWait` seconds; more asks for the most): when nothing is newer, the server holds
    /// the request until a change commits or the wait ends (then the answer is empty).
    public func changes(since: Int64, limit: Int = API.maxChangesPage, wait: Int = 0) throws(ClientError) -> (records: [FileRecord], nextSequence: Int64) {
        let reply = try changesPage(since: since, limit: limit, wait: wait)
        return (reply.changes, reply.nextSequence)
    }

    /// One page of the change feed with the administrator's deletions; pass its
    /// `nextSequence` next time. `wait` as for `changes`.
    /// `cancelled`: asked about once a second while the server holds the request; true gives it up (`.cancelled`).
    public func changesPage(since: Int64, limit: Int = API.maxChangesPage, wait: Int = 0,
                            cancelled: (@Sendable () -> Bool)? = nil) throws(ClientError) -> ChangesResponse {
        let wait = min(max(wait, 0), API.maxChangesWait)
        let query = API.changes + "?since=\(since)&limit=\(limit)" + (wait > 0 ? "&wait=\(wait)" : "")
        // The reply may come only after the wait: the request's timeouts start after it.
        return try decode(ChangesResponse.self, call("GET", query, timeouts: wait > 0 ? connection.timeouts.holding(wait) : nil,
                                                     cancelled: cancelled))
    }

    /// The name of the device this client's token belongs to.
    public func deviceName() throws(ClientError) -> String {
        try decode(WatermarkResponse.self, call("GET", API.watermark)).device
    }

    /// This device's stored backup cursor, nil before the first `setWatermark`.
    public func watermark() throws(ClientError) -> Watermark? {
        try decode(WatermarkResponse.self, call("GET", API.watermark)).watermark
    }

    public func setWatermark(_ watermark: Watermark) throws(ClientError) {
        _ = try call("PUT", API.watermark, json: watermark)
    }

    /// A content's manifest (`GET /v1/contents/<hash>/blocks`), checked: its blocks hash
    /// to `content` and fit its size, else `.invalidResponse`.
    public func contentBlocks(_ content: SHA256Digest) throws(ClientError) -> BlockManifest {
        let reply = try connection.perform(method: "GET", url: baseURL + API.contentPrefix + content.hex + API.blocksSuffix,
                                           headers: [try authHeader()], responseLimit: API.maxManifestBody)
        try check(reply, expect: [200])
        let body = try decode(ContentBlocksResponse.self, reply)
        do {
            return try Validation.manifest(content: content.hex, size: body.size, blocks: body.blocks)
        } catch {
            throw .invalidResponse("the manifest of \(content.hex) does not check: \(error.message)")
        }
    }

    /// Downloads a content (or `range` of it) into `fd` at `fdOffset`; returns the bytes
    /// written. A whole download is checked against the content hash as it streams
    /// (`.contentMismatch` otherwise). A range is not checked here: a reader that must
    /// never see a wrong byte fetches whole blocks (`downloadBlock`, `contentBlocks`).
    @discardableResult
    public func download(content: SHA256Digest, range: ClosedRange<Int64>? = nil, to fd: Int32, at fdOffset: Int64 = 0,
                         progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> Int64 {
        let hasher = range == nil ? ContentHasher() : nil
        let written = try fetch(API.contentPrefix + content.hex, range: range, to: fd, at: fdOffset, direct: nil, hook: hasher.map { h in { h.update($0) } }, progress: progress)
        if let hasher {
            let got = hasher.finish().content
            guard got == content else { throw .contentMismatch("the downloaded content hashes to \(got.hex), not \(content.hex); download it again") }
        }
        return written
    }

    /// Downloads one stored block (or `range` of it) into `fd` at `fdOffset`; returns the
    /// bytes written. A whole block is checked against its hash (`.contentMismatch`).
    @discardableResult
    /// `direct`: an O_DIRECT descriptor of `fd`'s file, to write the block past the page cache.
    public func downloadBlock(_ hash: SHA256Digest, range: ClosedRange<Int64>? = nil, to fd: Int32, at fdOffset: Int64 = 0,
                              direct: Int32? = nil, progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> Int64 {
        let hasher = range == nil ? SHA256Hasher() : nil
        let written = try fetch(API.blockPrefix + hash.hex, range: range, to: fd, at: fdOffset, direct: direct,
                                hook: hasher.map { h in { h.update($0) } }, progress: progress)
        if let hasher {
            let got = hasher.finish()
            guard got == hash else { throw .contentMismatch("the downloaded block hashes to \(got.hex), not \(hash.hex); download it again") }
        }
        return written
    }

    /// Bytes `[offset, offset + length)` of one stored block, in memory (at most one
    /// block), from the server or (a scaled server's 307) its object store. Only their
    /// count is checked here: the caller holds the digest the bytes must have.
    public func blockBytes(_ hash: SHA256Digest, offset: Int, length: Int) throws(ClientError) -> [UInt8] {
        let reply = try getFollowingStore(API.blockPrefix + hash.hex, headers: ["Range: bytes=\(offset)-\(offset + length - 1)"]) {
            (url, headers) throws(ClientError) -> HTTPResult in
            try connection.perform(method: "GET", url: url, headers: headers, responseLimit: Blocks.size)
        }
        try check(reply, expect: [206, 200])
        if reply.status == 200 {   // a server that ignored the Range sent the whole block
            guard reply.body.count >= offset + length else { throw .invalidResponse("block \(hash.hex) is shorter than the range asked") }
            return Array(reply.body[offset..<(offset + length)])
        }
        guard reply.body.count == length else {
            throw .invalidResponse("\(reply.body.count) bytes of block \(hash.hex) came for a range of \(length)")
        }
        return reply.body
    }

    /// Downloads one whole stored block into `fd` from offset 0 (nil: nowhere), handing
    /// every piece to `piece`; not checked here (the caller hashes the pieces). Returns
    /// the bytes received.
    @discardableResult
    public func streamBlock(_ hash: SHA256Digest, to fd: Int32?, direct: Int32? = nil, piece: (UnsafeRawBufferPointer) -> Void) throws(ClientError) -> Int64 {
        try withoutActuallyEscaping(piece) { piece throws(ClientError) -> Int64 in
            try fetch(API.blockPrefix + hash.hex, range: nil, to: fd, at: 0, direct: direct, hook: piece, progress: nil)
        }
    }

    /// A stored block's chunk digests (`GET /v1/blocks/<hash>/chunks`), checked for shape:
    /// one per `Blocks.chunkSize` piece of the block's size.
    public func chunkDigests(_ hash: SHA256Digest) throws(ClientError) -> [SHA256Digest] {
        let reply = try connection.perform(method: "GET", url: baseURL + API.blockPrefix + hash.hex + API.chunksSuffix,
                                           headers: [try authHeader()], responseLimit: 64 << 10)
        try check(reply, expect: [200])
        let body = try decode(BlockChunksResponse.self, reply)
        let digests = body.chunks.compactMap(SHA256Digest.init(hex:))
        let expected = Int((body.size + Int64(Blocks.chunkSize) - 1) / Int64(Blocks.chunkSize))
        guard body.chunkSize == Blocks.chunkSize, digests.count == body.chunks.count, digests.count == expected else {
            throw .invalidResponse("the chunk list of block \(hash.hex) does not fit its size \(body.size) in \(Blocks.chunkSize)-byte chunks")
        }
        return digests
    }

    /// GET of `path` (with one Range) into `fd` (nil: only to `hook`); `hook` sees every piece.
    private func fetch(_ path: String, range: ClosedRange<Int64>?, to fd: Int32?, at fdOffset: Int64, direct: Int32?,
                       hook: ((UnsafeRawBufferPointer) -> Void)?, progress: ((Int64) -> Bool)?) throws(ClientError) -> Int64 {
        let counter = ByteCounter()
        let reply = try getFollowingStore(path, headers: range.map { ["Range: bytes=\($0.lowerBound)-\($0.upperBound)"] } ?? []) {
            (url, headers) throws(ClientError) -> HTTPResult in
            let reply = try connection.perform(method: "GET", url: url, headers: headers,
                                               sink: fd, sinkOffset: fdOffset, directSink: direct, sinkHook: { chunk in
                                                   counter.count += Int64(chunk.count)
                                                   hook?(chunk)
                                               }, progress: progress)
            // A redirect's body is not the block's, and it went where the block goes.
            guard reply.status != 307 || counter.count == 0 else { throw .invalidResponse("the redirect of \(path) came with a body") }
            return reply
        }
        try check(reply, expect: range == nil ? [200] : [206, 200])
        return counter.count
    }

    /// A GET of `path` on the server with `headers` and the device's token, through
    /// `get` (one request). A scaled server answers a block's GET with 307 to a presigned
    /// URL of its object store: that is followed once, with the same `headers` (the Range)
    /// but never the token (the store is another host, and the URL is its own
    /// credential), and only to an absolute http or https URL.
    private func getFollowingStore(_ path: String, headers: [String],
                                   _ get: (_ url: String, _ headers: [String]) throws(ClientError) -> HTTPResult) throws(ClientError) -> HTTPResult {
        let reply = try get(baseURL + path, [try authHeader()] + headers)
        guard reply.status == 307 else { return reply }
        let location = reply.header("Location") ?? ""
        guard HTTPConnection.isWebURL(location) else {
            throw .invalidResponse("the server redirected \(path) to '\(location.prefix(200))', not to an http or https URL")
        }
        return try get(location, headers)
    }

    // MARK: plumbing

    /// The token's header; refused (before any connection) where it would cross plain HTTP to another machine.
    func authHeader() throws(ClientError) -> String {
        if let tokenRefusal { throw .insecure(tokenRefusal) }
        return "Authorization: Bearer \(token)"
    }

    /// A PATCH's headers. `Expect:` (empty) keeps libcurl from sending
    /// `Expect: 100-continue` and waiting for the server's `100 Continue` before the body,
    /// one round trip per PATCH for nothing: a presigned PATCH is refused only for a bad
    /// URL or offset, and then the server answers at once and drops the connection.
    private func patchHeaders(offset: Int64) -> [String] {
        [tusHeader, "Content-Type: \(Tus.offsetContentType)", "\(Tus.uploadOffset): \(offset)", "Expect:"]
    }
    private var tusHeader: String { "\(Tus.resumable): \(API.tusVersion)" }

    func call(_ method: String, _ pathAndQuery: String, auth: Bool = true, timeouts: Timeouts? = nil,
              cancelled: (@Sendable () -> Bool)? = nil) throws(ClientError) -> HTTPResult {
        let reply = try connection.perform(method: method, url: baseURL + pathAndQuery, headers: auth ? [try authHeader()] : [],
                                           progress: cancelled.map { c in { _ in !c() } }, timeouts: timeouts)
        try check(reply, expect: [200, 201])
        return reply
    }

    func call<T: Encodable>(_ method: String, _ path: String, json: T) throws(ClientError) -> HTTPResult {
        try call(method, path, body: WireJSON.encode(json))
    }

    func call(_ method: String, _ path: String, body: [UInt8]) throws(ClientError) -> HTTPResult {
        let reply = try connection.perform(method: method, url: baseURL + path,
                                           headers: [try authHeader(), "Content-Type: application/json", "Expect:"], body: .bytes(body))
        try check(reply, expect: [200, 201])
        return reply
    }

    func decode<T: Decodable>(_ type: T.Type, _ reply: HTTPResult) throws(ClientError) -> T {
        do { return try WireJSON.decode(T.self, from: reply.body) } catch {
            throw .invalidResponse("cannot decode \(T.self): \(WireJSON.describe(error).message)")
        }
    }

    /// Maps an HTTP status outside `expect` to a `ClientError`.
    func check(_ reply: HTTPResult, expect: Set<Int>) throws(ClientError) {
        if expect.contains(reply.status) { return }
        let error = try? WireJSON.decode(ErrorResponse.self, from: reply.body)
        let message = error?.message ?? (reply.body.isEmpty ? "no details" : String(decoding: reply.body.prefix(300), as: UTF8.self))
        switch reply.status {
        case 403: throw .expired  // only presigned URLs answer 403 (a HEAD reply has no body)
        case 404: throw .notFound
        case 409 where error?.error == "offset_conflict" || error?.error == "upload_busy":
            throw .offsetConflict(serverOffset: reply.header(Tus.uploadOffset).flatMap { Int64($0) })
        case 409 where error?.error == "missing_blocks":
            throw .missingBlocks((error?.missing ?? []).compactMap { SHA256Digest(hex: $0) })
        case Tus.checksumMismatchStatus where error?.error == "block_checksum_mismatch": throw .contentMismatch(message)
        case Tus.checksumMismatchStatus: throw .checksumMismatch
        default: throw .http(status: reply.status, message: message)
        }
    }

    static func hash(fd: Int32, offset: Int64, length: Int64) throws(ClientError) -> SHA256Digest {
        let hasher = SHA256Hasher()
        try readOnce(fd: fd, offset: offset, length: length) { hasher.update($0) }
        return hasher.finish()
    }

    static func percentEncode(_ s: String) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"), UInt8(ascii: "/"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += "%" + Hex.encode([b]).uppercased()
            }
        }
        return out
    }
}
