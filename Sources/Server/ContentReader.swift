import Crypto
import Protocol
import Storage

/// A content's bytes assembled from its blocks for a streamed reply: each piece is read
/// from the block file that holds it (opened when the reply reaches it, one at a time),
/// zero blocks are served as zeros without touching the disk. Blocks were verified
/// against their hashes when stored; the client checks them again (block hashes, or
/// the content hash of a whole download).
/// `@unchecked Sendable`: used by its connection's thread only (BodyReader's rule).
final class ContentReader: BodyReader, @unchecked Sendable {
    private let manifest: BlockManifest
    private let store: BlobStore
    private var openIndex = -1
    private var fd: Int32 = -1

    init(manifest: BlockManifest, store: BlobStore) {
        self.manifest = manifest
        self.store = store
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
            guard let opened = try? store.open(manifest.blocks[index]) else { return nil }
            fd = opened
            openIndex = index
        }
        guard let n = try? FileIO.pread(fd, into: piece, at: within), n > 0 else { return nil }
        return n
    }

    func close() { closeBlock() }

    private func closeBlock() {
        if fd >= 0 { FileIO.close(fd) }
        fd = -1
        openIndex = -1
    }
}
