import Crypto
import Foundation
import Protocol
import Storage

/// `POST /v1/blocks/fetch`: the blocks asked (`BlockPackRequest`, at most
/// `API.maxPackHashes`), as one block pack in the order asked, a block asked twice sent
/// twice. Every hash is looked up first (one query): a block the workspace lacks is 404
/// before a byte is sent, a reply over `API.maxPackReply` 413. The reply is streamed,
/// its length known up front: one block file open (or one object in memory, a few
/// fetched ahead) at a time, never the whole pack.
enum BlockPackFetch {
    static func answer(_ request: BlockPackRequest, context: ServerContext) -> HTTPResponse {
        guard request.hashes.count <= API.maxPackHashes else {
            return .error(413, "too_many_hashes", "at most \(API.maxPackHashes) blocks per fetch, \(request.hashes.count) asked: ask for fewer per call", field: "hashes")
        }
        var digests: [SHA256Digest] = []
        digests.reserveCapacity(request.hashes.count)
        for (i, text) in request.hashes.enumerated() {
            guard let d = SHA256Digest(hex: text) else {
                return .error(400, "bad_request", "hashes.\(i) is not a SHA-256 (64 hex digits)", field: "hashes.\(i)")
            }
            digests.append(d)
        }
        do {
            let sizes = try context.metadata.blockSizes(Array(Set(digests.map(\.hex))))
            var records: [PackRecord] = []
            records.reserveCapacity(digests.count)
            var total: Int64 = 0
            for (i, d) in digests.enumerated() {
                guard let size = sizes[d.hex], size >= 1, size <= Int64(Blocks.size) else {
                    return .error(404, "not_found", "the workspace has no block \(d.hex) (hashes.\(i), the first it lacks); nothing was sent: ask again without it "
                                  + "(zero blocks are never stored: a device makes them itself)", field: "hashes.\(i)")
                }
                records.append(PackRecord(index: i, digest: d, length: Int(size)))
                total += Int64(BlockPack.recordSize(length: Int(size)))
            }
            guard total <= Int64(API.maxPackReply) else {
                let fit = Self.fitting(records)
                return .error(413, "body_too_large", "the \(records.count) blocks asked make a pack of \(total) bytes, more than the \(API.maxPackReply) one fetch may answer: "
                              + "ask for fewer per call (the first \(fit) fit)", field: "hashes")
            }
            let headers = [("Content-Type", BlockPack.mediaType)]
            if records.isEmpty { return HTTPResponse(status: 200, headers: headers) }
            return HTTPResponse(status: 200, headers: headers, body: .stream(length: total, reader: PackReader(records, feed: context.blocks.feed(records))))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// How many of `records`, from the first, fit one reply.
    private static func fitting(_ records: [PackRecord]) -> Int {
        var total = 0
        for (i, r) in records.enumerated() {
            total += BlockPack.recordSize(length: r.length)
            if total > API.maxPackReply { return i }
        }
        return records.count
    }
}

/// A pack's bytes for a streamed reply: each record's header, then its block, opened
/// by the store's feed when the reply reaches it, one at a time (an object store's feed
/// fetches ahead: `ObjectPrefetch`). A block shorter than its row says (damage) ends the
/// reply short: the client's check of the pack's length and of each block's hash sees it.
/// libmicrohttpd asks for the bytes in order; a position out of order ends the reply.
/// `@unchecked Sendable`: used by its connection's thread only (BodyReader's rule).
final class PackReader: BodyReader, @unchecked Sendable {
    private let feed: any BlockFeed
    private var encoder: BlockPackEncoder
    /// The record whose block is open, and the block.
    private var open = -1
    private var block: OpenBlock?

    init(_ records: [PackRecord], feed: any BlockFeed) {
        self.feed = feed
        encoder = BlockPackEncoder(records.map { ($0.digest, $0.length) })
    }

    func read(at position: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        guard position == encoder.position else { return nil }
        guard let n = encoder.fill(buffer, block: { record, offset, piece in
            guard enter(record) else { return nil }
            return block?.read(into: piece, at: offset)
        }), n > 0 else { return nil }
        return n
    }

    /// Opens record `i`'s block unless it is open; false when it cannot be read.
    private func enter(_ i: Int) -> Bool {
        if i == open { return true }
        closeBlock()
        guard let opened = feed.block(i) else { return false }
        block = opened
        open = i
        return true
    }

    func close() {
        closeBlock()
        feed.close()
    }

    private func closeBlock() {
        block?.close()
        block = nil
        open = -1
    }
}

/// A pack's objects fetched ahead of the reply, on background threads, up to
/// `aheadBytes` (at least one block) beyond the one being sent: the connection's thread
/// waits for a round trip to the store at the start, not once per block.
/// `@unchecked Sendable`: its state is guarded by `condition`.
final class ObjectPrefetch: BlockFeed, @unchecked Sendable {
    static let aheadBytes = 8 << 20

    private enum Slot { case fetching, fetched([UInt8]?) }
    private let records: [PackRecord]
    private let objects: ObjectBlocks
    private let condition = NSCondition()
    private var slots: [Int: Slot] = [:]
    /// Records whose fetch began, from the first.
    private var started = 0
    private var closed = false

    init(_ records: [PackRecord], objects: ObjectBlocks) { self.records = records; self.objects = objects }

    /// Record `index`'s block, waiting for its fetch; nil when it failed or is not its length.
    func block(_ index: Int) -> OpenBlock? {
        condition.lock()
        defer { condition.unlock() }
        startFetches(from: index)
        while true {
            if closed { return nil }
            if case .fetched(let bytes) = slots[index] {
                slots[index] = nil
                return bytes.map(OpenBlock.bytes)
            }
            condition.wait()
        }
    }

    /// Under the lock: begins the fetches from `index` on while the blocks not yet sent
    /// stay within `aheadBytes`.
    private func startFetches(from index: Int) {
        if started < index { started = index }
        var ahead = records[index..<started].reduce(0) { $0 + $1.length }
        while started < records.count, started == index || ahead + records[started].length <= Self.aheadBytes {
            let i = started, record = records[i]
            slots[i] = .fetching
            ahead += record.length
            started += 1
            DispatchQueue.global().async { [self] in
                let bytes = try? objects.bytes(record.digest)
                condition.lock()
                defer { condition.unlock() }
                guard !closed else { return }
                slots[i] = .fetched(bytes.flatMap { $0.count == record.length ? $0 : nil })
                condition.broadcast()
            }
        }
    }

    func close() {
        condition.lock()
        closed = true
        slots = [:]
        condition.broadcast()
        condition.unlock()
    }
}
