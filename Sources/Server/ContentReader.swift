import Crypto
import Protocol
import Storage

/// A content's bytes assembled from its blocks for a streamed reply: zero blocks are
/// served as zeros without a read; a stored block is opened from the store when the
/// reply reaches it, one at a time (its file, or, from an object store, its bytes
/// fetched whole into memory, at most 4 MiB). Blocks were verified against their hashes
/// when stored; the client checks them again (block hashes, or the content hash of a
/// whole download).
/// `@unchecked Sendable`: used by its connection's thread only (BodyReader's rule).
final class ContentReader: BodyReader, @unchecked Sendable {
    private let manifest: BlockManifest
    private let store: any BlockStore
    private var openIndex = -1
    private var block: OpenBlock?

    init(manifest: BlockManifest, store: any BlockStore) {
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
            guard let opened = store.open(manifest.blocks[index], length: manifest.length(ofBlock: index)) else { return nil }
            block = opened
            openIndex = index
        }
        guard let n = block?.read(into: piece, at: Int(within)), n > 0 else { return nil }
        return n
    }

    func close() { closeBlock() }

    private func closeBlock() {
        block?.close()
        block = nil
        openIndex = -1
    }
}
