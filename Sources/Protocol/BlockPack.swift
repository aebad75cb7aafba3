import Crypto

/// A block pack: many blocks in one body, for the many small files a sync sends and
/// fetches (`POST /v1/blocks` up, `POST /v1/blocks/fetch` down; Docs/protocol.md). One
/// request carries what would otherwise be a request (and, up, a durable commit) per block.
///
/// The body is a sequence of records, nothing before, between or after them:
///
///     32 bytes   the block's SHA-256, raw
///      4 bytes   its length, big-endian, 1 to `Blocks.size`
///      n bytes   the block
///
/// Records are numbered from 0 in the order they come; error messages name them so.
public enum BlockPack {
    /// The `Content-Type` of a pack, both ways.
    public static let mediaType = "application/vnd.vdrive.block-pack"
    /// A record's digest and length.
    public static let headerSize = 36

    /// The bytes a record of a `length`-byte block takes.
    public static func recordSize(length: Int) -> Int { headerSize + length }

    /// A record's first 36 bytes.
    public static func header(_ digest: SHA256Digest, length: Int) -> [UInt8] {
        precondition((1...Blocks.size).contains(length), "a block has 1 to \(Blocks.size) bytes")
        let n = UInt32(length)
        return digest.bytes + [UInt8(n >> 24), UInt8(truncatingIfNeeded: n >> 16), UInt8(truncatingIfNeeded: n >> 8), UInt8(truncatingIfNeeded: n)]
    }

    /// A whole pack in memory (tests, small packs): each block's record, in order. The
    /// digests are computed here.
    public static func encode(_ blocks: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(blocks.reduce(0) { $0 + recordSize(length: $1.count) })
        for block in blocks {
            out += header(SHA256Hasher.digest(block), length: block.count)
            out += block
        }
        return out
    }
}

/// Writes a pack out piece by piece, for a body sent as it is made (a device's upload
/// read from the blocks' files, a server's reply read from its store): the records'
/// headers are made here, each block's bytes are put in by the caller when reached.
public struct BlockPackEncoder: Sendable {
    private let records: [(digest: SHA256Digest, length: Int)]
    /// The record being written, its header, and the bytes of it written so far.
    private var index = 0
    private var header: [UInt8] = []
    private var written = 0
    /// Bytes of the pack written so far.
    public private(set) var position: Int64 = 0
    /// The whole pack's length.
    public let length: Int64

    /// Each length must be 1 to `Blocks.size` (checked: a pack cannot say otherwise).
    public init(_ records: [(digest: SHA256Digest, length: Int)]) {
        self.records = records
        length = records.reduce(Int64(0)) { $0 + Int64(BlockPack.recordSize(length: $1.length)) }
    }

    /// Fills the start of `buffer` with the next bytes of the pack, across as many records
    /// as fit; `block(record, offset, piece)` puts bytes of record `record`'s block from
    /// `offset` into the start of `piece` and returns how many (more than 0), or nil when
    /// it cannot. Returns the bytes filled: 0 at the end of the pack, nil when `block`
    /// failed before any byte was filled (after some, they are returned and the next call fails).
    public mutating func fill(_ buffer: UnsafeMutableRawBufferPointer,
                              block: (_ record: Int, _ offset: Int, _ piece: UnsafeMutableRawBufferPointer) -> Int?) -> Int? {
        var filled = 0
        while filled < buffer.count, index < records.count {
            let record = records[index]
            if written == 0 { header = BlockPack.header(record.digest, length: record.length) }
            let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[filled...])
            let n: Int
            if written < BlockPack.headerSize {
                n = min(piece.count, BlockPack.headerSize - written)
                header.withUnsafeBytes { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[written..<written + n])) }
            } else {
                let offset = written - BlockPack.headerSize
                let want = min(piece.count, record.length - offset)
                guard let got = block(index, offset, UnsafeMutableRawBufferPointer(rebasing: piece[0..<want])), got > 0, got <= want else {
                    return filled > 0 ? filled : nil
                }
                n = got
            }
            filled += n
            written += n
            position += Int64(n)
            if written == BlockPack.recordSize(length: record.length) {
                index += 1
                written = 0
            }
        }
        return filled
    }
}

/// Why a pack's bytes are not a pack.
public enum BlockPackError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Record `record` declares a length outside 1 to `Blocks.size`.
    case badLength(record: Int, length: UInt32)
    /// The body ended inside record `record`, at least `missing` bytes short of its end.
    case truncated(record: Int, missing: Int)

    public var description: String {
        switch self {
        case .badLength(let record, let length):
            return "record \(record) (counting from 0) declares a block of \(length) bytes; a block has 1 to \(Blocks.size) bytes"
        case .truncated(let record, let missing):
            return "the pack ends inside record \(record) (counting from 0), at least \(missing) bytes before its end"
        }
    }
}

/// Reads a pack as it arrives, in pieces of any size, and says what each piece holds:
/// a record's header, bytes of its block, its end. It checks the framing only (lengths,
/// truncation); whether a block's bytes hash to its digest is the reader's to check.
public struct BlockPackDecoder: Sendable {
    public enum Part {
        /// A record begins: its number (from 0), digest and length.
        case header(record: Int, digest: SHA256Digest, length: Int)
        /// Bytes of the current record's block, in order; valid during the call only.
        case bytes(UnsafeRawBufferPointer)
        /// The current record's last byte came.
        case end(record: Int)
    }

    /// Header bytes gathered so far (a header may come split over pieces).
    private var header: [UInt8] = []
    /// Bytes of the current record's block still to come; 0 between records.
    private var remaining = 0
    /// Records begun.
    public private(set) var records = 0

    public init() { header.reserveCapacity(BlockPack.headerSize) }

    /// True between records: a body may end here.
    public var atRecordBoundary: Bool { header.isEmpty && remaining == 0 }

    /// Feeds the next piece of the body; `part` is called for what it holds, in order.
    /// Throws `BlockPackError` for a bad length (nothing more should be fed), or what `part` throws.
    public mutating func feed(_ piece: UnsafeRawBufferPointer, _ part: (Part) throws -> Void) throws {
        var at = 0
        while at < piece.count {
            if remaining > 0 {
                let take = min(remaining, piece.count - at)
                try part(.bytes(UnsafeRawBufferPointer(rebasing: piece[at..<at + take])))
                at += take
                remaining -= take
                if remaining == 0 { try part(.end(record: records - 1)) }
                continue
            }
            let take = min(BlockPack.headerSize - header.count, piece.count - at)
            header.append(contentsOf: UnsafeRawBufferPointer(rebasing: piece[at..<at + take]))
            at += take
            guard header.count == BlockPack.headerSize else { continue }
            let length = header[32...].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            let record = records
            guard length >= 1, length <= UInt32(Blocks.size) else { throw BlockPackError.badLength(record: record, length: length) }
            let digest = SHA256Digest(bytes: Array(header[0..<32]))
            header.removeAll(keepingCapacity: true)
            records += 1
            remaining = Int(length)
            try part(.header(record: record, digest: digest, length: Int(length)))
        }
    }

    /// The body ended: throws `.truncated` when it ended inside a record.
    public func finish() throws(BlockPackError) {
        if !header.isEmpty { throw .truncated(record: records, missing: BlockPack.headerSize - header.count) }
        if remaining > 0 { throw .truncated(record: records - 1, missing: remaining) }
    }
}
