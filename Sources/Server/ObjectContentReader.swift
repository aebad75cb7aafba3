import Crypto
import Protocol
import Storage

/// A content's bytes assembled from its blocks in the object store, for a streamed reply
/// of a scaled server: each block is read whole into memory (at most 4 MiB) when the
/// reply reaches it, one at a time; zero blocks are served as zeros without a read.
/// Devices that can fetch blocks (restore, the drive) use `GET /v1/blocks/<hash>`, which
/// the store answers directly; this path is for whole-file downloads by plain clients.
/// `@unchecked Sendable`: used by its connection's thread only (BodyReader's rule).
final class ObjectContentReader: BodyReader, @unchecked Sendable {
    private let manifest: BlockManifest
    private let objects: ObjectBlocks
    private var heldIndex = -1
    private var held: [UInt8] = []

    init(manifest: BlockManifest, objects: ObjectBlocks) {
        self.manifest = manifest
        self.objects = objects
    }

    func read(at position: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int? {
        guard position < manifest.size, !buffer.isEmpty else { return nil }
        let index = Int(position / Int64(Blocks.size))
        let within = Int(position - Int64(index) * Int64(Blocks.size))
        let count = min(buffer.count, manifest.length(ofBlock: index) - within)
        let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
        if manifest.isZero(index) {
            piece.initializeMemory(as: UInt8.self, repeating: 0)
            return count
        }
        if heldIndex != index {
            guard let bytes = try? objects.bytes(manifest.blocks[index]), bytes.count == manifest.length(ofBlock: index) else { return nil }
            held = bytes
            heldIndex = index
        }
        held.withUnsafeBytes { piece.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[within..<within + count])) }
        return count
    }

    func close() {
        held = []
        heldIndex = -1
    }
}
