import Synchronization

/// Content in blocks: the definitions every piece (drive, backup, server) shares.
///
/// A file's bytes are cut into blocks of `Blocks.size` (4 MiB) at fixed, aligned
/// offsets; every block but the last is exactly that long, the last holds the rest.
/// A block is named by the SHA-256 of its bytes. A file's *content hash* (its
/// identity) is the SHA-256 of the concatenation of its block digests (32 raw bytes
/// each), in order. So it is computable from the block digests alone (a change costs
/// what changed), and it streams while a file is written in order. The empty file
/// has no blocks: its content hash is the SHA-256 of the empty string. This is the
/// definition of Dropbox's documented `content_hash`, with the same block size.
///
/// A block of zeros (a hole) keeps its real digest in the list, so the content hash
/// depends on the bytes alone; such a block is never stored or sent (`Blocks.isZero`).
public enum Blocks {
    /// 4 MiB: large enough that a 1 GiB file is 256 rows and one request per block is
    /// noise on the wire; small enough that a changed byte costs one 4 MiB block.
    public static let size = 4 << 20

    /// 256 KiB: the unit a partial read of a block fetched from the server is verified
    /// by (its SHA-256 is in the block's chunk list), so reading 64 KiB of a file that is
    /// not local fetches one chunk, not the whole block. 16 chunks per block.
    public static let chunkSize = 256 << 10

    /// How many blocks a file of `fileSize` bytes has.
    public static func count(forSize fileSize: Int64) -> Int {
        // Divided first: `fileSize + size - 1` overflows for sizes near Int64.max.
        fileSize <= 0 ? 0 : Int(fileSize / Int64(size) + (fileSize % Int64(size) == 0 ? 0 : 1))
    }

    /// The length of block `index` in a file of `fileSize` bytes (0 past the end).
    public static func length(ofBlock index: Int, fileSize: Int64) -> Int {
        let start = Int64(index) * Int64(size)
        return Int(max(0, min(Int64(size), fileSize - start)))
    }

    /// The digest of `length` zero bytes. Asked for every block of every file that goes
    /// by (is it a hole?), with as many lengths as there are small files, and on a server
    /// with lengths a client chose: so neither a hash of up to 4 MiB of zeros per call
    /// nor a cache growing with each new length, but the hash resumed from the nearest
    /// saved point below `length` (`ZeroRuns`), at most 4 KiB of zeros hashed per call.
    public static func zeroDigest(length: Int) -> SHA256Digest { ZeroRuns.shared.digest(length: length) }

    /// True when `digest` names a block of `length` zeros: a hole, never stored or sent.
    public static func isZero(_ digest: SHA256Digest, length: Int) -> Bool {
        digest == zeroDigest(length: length)
    }
}

/// A file's identity from its block digests (see `Blocks`).
public enum ContentHash {
    /// SHA-256 over the block digests' raw bytes, in order.
    public static func of(blocks: [SHA256Digest]) -> SHA256Digest {
        let h = SHA256Hasher()
        for b in blocks { h.update(b.bytes) }
        return h.finish()
    }

    /// The content hash of bytes held in memory (tests, small payloads).
    public static func of(bytes: [UInt8]) -> SHA256Digest {
        let hasher = ContentHasher()
        bytes.withUnsafeBytes { hasher.update($0) }
        return hasher.finish().content
    }
}

/// Streaming content hash: feed the bytes of a file in order, get its block digests
/// and its content hash. Memory: one SHA-256 context and the list of block digests.
/// Belongs to one thread at a time.
public final class ContentHasher {
    private var block = SHA256Hasher()
    private var inBlock = 0
    public private(set) var blocks: [SHA256Digest] = []
    public private(set) var byteCount: Int64 = 0

    public init() {}

    public func update(_ buffer: UnsafeRawBufferPointer) {
        var rest = buffer
        while !rest.isEmpty {
            let take = min(rest.count, Blocks.size - inBlock)
            block.update(UnsafeRawBufferPointer(rebasing: rest[0..<take]))
            inBlock += take
            byteCount += Int64(take)
            rest = UnsafeRawBufferPointer(rebasing: rest[take...])
            if inBlock == Blocks.size {
                blocks.append(block.finish())
                block = SHA256Hasher()
                inBlock = 0
            }
        }
    }

    /// The block digests and the content hash of everything fed so far. Call once.
    public func finish() -> (content: SHA256Digest, blocks: [SHA256Digest]) {
        if inBlock > 0 {
            blocks.append(block.finish())
            inBlock = 0
        }
        return (ContentHash.of(blocks: blocks), blocks)
    }
}

/// SHA-256 states after 0, 4 KiB, 8 KiB, ... up to `Blocks.size` zero bytes, made as far
/// as asked (at most 1,025 of them, about 200 KB). A digest of n zeros copies the state
/// at the 4 KiB boundary below n and hashes the rest.
final class ZeroRuns: Sendable {
    static let shared = ZeroRuns()
    static let step = 4 << 10
    private let points = Mutex<[SHA256Hasher]>([SHA256Hasher()])
    private let zeros = [UInt8](repeating: 0, count: step)

    func digest(length: Int) -> SHA256Digest {
        let n = max(0, length)
        let point = min(n / Self.step, Blocks.size / Self.step)
        let h = points.withLock { points in
            while points.count <= point {
                let next = points[points.count - 1].copy()
                next.update(zeros)
                points.append(next)
            }
            return points[point].copy()
        }
        // The rest past the saved point: under 4 KiB, more only for a length above a
        // block's (never a block's length).
        var left = n - point * Self.step
        zeros.withUnsafeBytes { z in
            while left > 0 {
                let take = min(left, z.count)
                h.update(UnsafeRawBufferPointer(rebasing: z[0..<take]))
                left -= take
            }
        }
        return h.finish()
    }
}
