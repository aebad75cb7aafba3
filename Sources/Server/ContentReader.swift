import Crypto
import Protocol
import Storage

/// A content's bytes assembled from its blocks for a streamed reply: zero blocks are
/// served as zeros without a read; a stored block is read from its file (opened when
/// the reply reaches it, one at a time) or, on a server keeping blocks in an object
/// store, fetched whole into memory (at most 4 MiB, one at a time). Blocks were
/// verified against their hashes when stored; the client checks them again (block
/// hashes, or the content hash of a whole download).
/// `@unchecked Sendable`: used by its connection's thread only (BodyReader's rule).
final class ContentReader: BodyReader, @unchecked Sendable {
    enum Source {
        case folder(BlobStore)
        case objects(ObjectBlocks)
    }

    private let manifest: BlockManifest
    private let source: Source
    private var openIndex = -1
    private var fd: Int32 = -1
    private var held: [UInt8] = []

    init(manifest: BlockManifest, source: Source) {
        self.manifest = manifest
        self.source = source
    }

    func read(at position: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        guard position < manifest.size, !buffer.isEmpty else { return nil }
        let index = Int(position / Int64(Blocks.size))
        let within = position - Int64(index) * Int64(Blocks.size)
        let count = Int(min(Int64(buffer.count), Int64(manifest.length(ofBlock: index)) - within))
        let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
        if manifest.isZero(index) {
            piece.initializeMemory(as: UInt8.self, repeating: 0)
            return count
        }
        if openIndex != index {
            closeBlock()
            switch source {
            case .folder(let store):
                guard let opened = try? store.open(manifest.blocks[index]) else { return nil }
                fd = opened
            case .objects(let objects):
                guard let bytes = try? objects.bytes(manifest.blocks[index]), bytes.count == manifest.length(ofBlock: index) else { return nil }
                held = bytes
            }
            openIndex = index
        }
        if case .objects = source {
            held.withUnsafeBytes { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(within)..<Int(within) + count])) }
            return count
        }
        guard let n = try? FileIO.pread(fd, into: piece, at: within), n > 0 else { return nil }
        return n
    }

    func close() { closeBlock() }

    private func closeBlock() {
        if fd >= 0 { FileIO.close(fd) }
        fd = -1
        held = []
        openIndex = -1
    }
}
