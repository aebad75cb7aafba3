import Crypto
import Protocol
#if canImport(Glibc)
import Glibc
#endif

/// Block packs (`BlockPack`, Docs/protocol.md): many blocks in one request each way, for
/// the many small files of a sync. Up, a pack is read from the blocks' files as it is
/// sent; down, each block is checked against its hash before it is handed on. Neither
/// holds more than one block in memory.
extension WorkspaceClient {
    /// Sends blocks in packs (`POST /v1/blocks`), as many packs of at most
    /// `API.maxPackBody` as they need, one after the other. Each block is `length` bytes
    /// (1 to `Blocks.size`, not all zeros): of its file from offset 0, read while it is
    /// sent, or in memory (a small block a device keeps in its catalog).
    /// Returns the server's counts summed: blocks stored by these packs, and blocks the
    /// workspace had already (a block sent twice counts once stored, then present).
    /// A pack is stored whole or not at all; when this throws, the packs before the
    /// failing one are stored. `.contentMismatch`: a block's bytes do not hash to its
    /// digest (its file changed since it was hashed); `.localIO`: a file could not be
    /// read, or was shorter than its length.
    @discardableResult
    public func sendBlockPack(_ blocks: [(digest: SHA256Digest, fd: Int32, length: Int)]) throws(ClientError) -> (stored: Int, present: Int) {
        try sendBlockPack(blocks.map { (digest: $0.digest, bytes: OutgoingBlockBytes.file($0.fd), length: $0.length) })
    }

    @discardableResult
    public func sendBlockPack(_ blocks: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)]) throws(ClientError) -> (stored: Int, present: Int) {
        var total = (stored: 0, present: 0)
        var start = 0
        while start < blocks.count {
            var end = start
            var bytes = 0
            while end < blocks.count {
                let length = blocks[end].length
                guard (1...Blocks.size).contains(length) else {
                    throw .localIO("block \(blocks[end].digest.hex) is said to have \(length) bytes; a block has 1 to \(Blocks.size)")
                }
                if end > start && bytes + BlockPack.recordSize(length: length) > API.maxPackBody { break }
                bytes += BlockPack.recordSize(length: length)
                end += 1
            }
            let pack = Array(blocks[start..<end])
            let counts = try sendPack(pack, bytes: bytes)
            total.stored += counts.stored
            total.present += counts.present
            start = end
        }
        return total
    }

    /// One `POST /v1/blocks` of `blocks`, `bytes` long.
    private func sendPack(_ blocks: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)], bytes: Int) throws(ClientError) -> BlockPackResponse {
        let reply = try connection.perform(method: "POST", url: baseURL + API.blockPack,
                                           headers: [try authHeader(), "Content-Type: \(BlockPack.mediaType)", "Expect:"],
                                           body: .stream(length: Int64(bytes), source: PackStream(blocks)))
        if reply.status == 400, let error = try? WireJSON.decode(ErrorResponse.self, from: reply.body), error.error == "block_checksum_mismatch" {
            throw .contentMismatch(error.message)
        }
        try check(reply, expect: [200])
        let counts = try decode(BlockPackResponse.self, reply)
        guard counts.stored >= 0, counts.present >= 0, counts.stored <= blocks.count, counts.present == blocks.count - counts.stored else {
            throw .invalidResponse("a pack of \(blocks.count) blocks was answered \(counts.stored) stored and \(counts.present) present")
        }
        return counts
    }

    /// Fetches blocks in packs (`POST /v1/blocks/fetch`) and hands each to `into`, in the
    /// order of `hashes` (a hash given twice is handed twice), once its bytes hash to it;
    /// the bytes are valid during the call only. Asks for at most `API.maxPackHashes` per
    /// request, fewer when the server finds the blocks too large for one reply (413).
    /// Throws what `into` throws (the transfer stops), `.notFound` when the workspace
    /// lacks one of them (nothing of that request was handed on), `.contentMismatch`
    /// when a block does not hash to its hash; blocks handed on before stay handed on.
    /// `checked: false` hands each block on unhashed, for a caller that checks every
    /// block itself (the drive does: hashed here too, every byte fetched was hashed twice,
    /// 347 MB more to hash for the bulk row's 10,000 files).
    public func fetchBlockPack(_ hashes: [SHA256Digest], checked: Bool = true, into: (SHA256Digest, UnsafeRawBufferPointer) throws -> Void) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Blocks.size, alignment: 16)
        defer { buffer.deallocate() }
        var start = 0
        var batch = API.maxPackHashes
        while start < hashes.count {
            let asked = Array(hashes[start..<min(hashes.count, start + batch)])
            do {
                try withoutActuallyEscaping(into) { into in try fetchPack(asked, checked: checked, buffer: buffer, into: into) }
                start += asked.count
            } catch ClientError.http(let status, _) where status == 413 && asked.count > 1 {
                batch = asked.count / 2   // refused before any byte: ask again for half
            }
        }
    }

    /// One `POST /v1/blocks/fetch` of `hashes`.
    private func fetchPack(_ hashes: [SHA256Digest], checked: Bool, buffer: UnsafeMutableRawBufferPointer,
                           into: @escaping (SHA256Digest, UnsafeRawBufferPointer) throws -> Void) throws {
        let unpacker = PackUnpacker(expected: hashes, checked: checked, buffer: buffer, deliver: into)
        let reply: HTTPResult
        do {
            reply = try connection.perform(method: "POST", url: baseURL + API.blockPackFetch,
                                           headers: [try authHeader(), "Content-Type: application/json", "Expect:"],
                                           body: .bytes(WireJSON.hashList("hashes", hashes.map(\.hex))),
                                           sinkHook: { unpacker.take($0) }, progress: { _ in unpacker.refusal == nil })
        } catch {
            if let refusal = unpacker.refusal { throw refusal }  // `into` threw: the transfer was cancelled
            throw error
        }
        if let refusal = unpacker.refusal { throw refusal }  // `into` threw at the last block, before a cancel could stop anything
        guard reply.status == 200 else {
            // The body went to the hook: its start is the error's JSON.
            try check(HTTPResult(status: reply.status, headers: reply.headers, body: unpacker.start), expect: [200])
            return
        }
        guard reply.header("Content-Type")?.lowercased().hasPrefix(BlockPack.mediaType) == true else {
            throw ClientError.invalidResponse("a block fetch was answered with Content-Type '\(reply.header("Content-Type") ?? "")', not \(BlockPack.mediaType)")
        }
        try unpacker.finish()
    }
}

/// Reads a pack to send from the blocks' files: each block `length` bytes of its
/// descriptor from offset 0, as libcurl asks for them.
/// `@unchecked Sendable`: used by the one thread running the request.
/// Where a block going up in a pack is read from: its own file (a descriptor, read from
/// offset 0; the caller keeps and closes it), or bytes already in memory.
public enum OutgoingBlockBytes: Sendable {
    case file(Int32)
    case memory([UInt8])
}

private final class PackStream: RequestBodyStream, @unchecked Sendable {
    private let sources: [OutgoingBlockBytes]
    private var encoder: BlockPackEncoder
    /// Why the last read failed (an errno).
    private var failure: Int32 = 0

    init(_ blocks: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)]) {
        sources = blocks.map(\.bytes)
        encoder = BlockPackEncoder(blocks.map { ($0.digest, $0.length) })
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let filled = encoder.fill(buffer) { record, offset, piece in
            var n: Int
            switch sources[record] {
            case .memory(let bytes):
                n = max(0, min(piece.count, bytes.count - offset))
                if n > 0 { bytes.withUnsafeBytes { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + n])) } }
            case .file(let fd):
                repeat { n = pread(fd, piece.baseAddress, piece.count, off_t(offset)) } while n < 0 && errno == EINTR
            }
            if n > 0 { return n }
            failure = n < 0 ? errno : EIO  // EIO: the file is shorter than the block
            return nil
        }
        guard let filled, filled > 0 else { return -Int(failure == 0 ? EIO : failure) }
        return filled
    }
}

/// Takes a fetched pack as it arrives: checks each record is the block asked at its
/// place, gathers its bytes in `buffer`, checks their hash, hands it on. The first
/// problem stops it (the rest of the reply is dropped); `into` throwing stops the transfer.
private final class PackUnpacker {
    private let expected: [SHA256Digest]
    /// Whether each block is hashed before it is handed on.
    private let checked: Bool
    private let buffer: UnsafeMutableRawBufferPointer
    private let deliver: (SHA256Digest, UnsafeRawBufferPointer) throws -> Void
    private var decoder = BlockPackDecoder()
    private var filled = 0
    private var delivered = 0
    /// What was wrong with the reply as a pack (reported only for a 200).
    private var problem: ClientError?
    /// What `into` threw.
    private(set) var refusal: (any Error)?
    /// The reply's first bytes: an error reply's JSON.
    private(set) var start: [UInt8] = []

    init(expected: [SHA256Digest], checked: Bool, buffer: UnsafeMutableRawBufferPointer, deliver: @escaping (SHA256Digest, UnsafeRawBufferPointer) throws -> Void) {
        self.expected = expected; self.checked = checked; self.buffer = buffer; self.deliver = deliver
    }

    func take(_ chunk: UnsafeRawBufferPointer) {
        if start.count < 64 << 10 { start += chunk.prefix(64 << 10 - start.count) }
        guard problem == nil, refusal == nil else { return }
        do {
            try decoder.feed(chunk) { part in
                switch part {
                case .header(let record, let digest, _):
                    guard record < expected.count, digest == expected[record] else {
                        throw ClientError.invalidResponse("record \(record) of the fetched pack is block \(digest.hex), not the one asked at that place")
                    }
                    filled = 0
                case .bytes(let bytes):
                    UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<filled + bytes.count]).copyMemory(from: bytes)
                    filled += bytes.count
                case .end(let record):
                    let block = UnsafeRawBufferPointer(rebasing: buffer[0..<filled])
                    if checked {
                        let hasher = SHA256Hasher()
                        hasher.update(block)
                        let actual = hasher.finish()
                        guard actual == expected[record] else {
                            throw ClientError.contentMismatch("block \(expected[record].hex) came hashing to \(actual.hex); fetch it again")
                        }
                    }
                    do { try deliver(expected[record], block) } catch { refusal = error; return }
                    delivered += 1
                }
            }
        } catch let error as ClientError {
            problem = error
        } catch {
            problem = .invalidResponse("the fetched pack is not a block pack: \(error)")
        }
    }

    /// The reply ended well: every block asked came, whole.
    func finish() throws(ClientError) {
        if let problem { throw problem }
        do { try decoder.finish() } catch { throw .invalidResponse("the fetched pack is cut short: \(error)") }
        guard delivered == expected.count else {
            throw .invalidResponse("\(expected.count) blocks were asked and \(delivered) came")
        }
    }
}
