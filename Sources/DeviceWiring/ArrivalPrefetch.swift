import Crypto
import Drive
import WorkspaceMirror

/// Small files the mirror brings down are fetched soon after they arrive, through the
/// drive's prefetch (non-interactive: held while paused or on a metered network, as any
/// prefetch), so the first read of a file just made on another device does not wait
/// for the server. Larger files stay online-only until read: fetching everything ahead
/// would copy the whole workspace to every device.
///
/// Also wakes the pin fetcher: a content brought into a pinned folder is fetched whole
/// whatever its size.
final class ArrivalPrefetch: MirrorArrivals {
    /// At most this size (1 MiB). A file this small is one request of one block and
    /// its transfer is short next to the round trip a cold read pays first; most files
    /// of a workspace are this small and most of its bytes are in larger ones, so
    /// fetching these costs little disk and traffic (Docs/benchmarks.md, "Small files
    /// fetched ahead").
    static let smallFileBytes: Int64 = 1 << 20

    private let cache: BlockCache
    private let wakePins: @Sendable () -> Void

    init(cache: BlockCache, wakePins: @escaping @Sendable () -> Void) {
        self.cache = cache
        self.wakePins = wakePins
    }

    func contentsArrived(_ contents: [(blocks: [SHA256Digest], size: Int64)]) {
        wakePins()
        var small: [(hash: SHA256Digest, length: Int)] = []
        for (blocks, size) in contents where size > 0 && size <= Self.smallFileBytes {
            for (index, block) in blocks.enumerated() {
                let length = Blocks.length(ofBlock: index, fileSize: size)
                if length > 0, !Blocks.isZero(block, length: length) { small.append((block, length)) }
            }
        }
        if !small.isEmpty { cache.prefetch(small) }
    }
}
