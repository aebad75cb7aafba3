import Foundation
import Crypto

/// Pinned content ("available offline"): a file carrying `CacheBound.pinAttribute`, or
/// any file below a folder carrying it, is kept whole on this device. The cache bound
/// never evicts its blocks (`Catalog.residentFiles` reports it pinned), and the blocks
/// it names that are not here (a synced file another device made, one made online-only
/// before it was pinned) are fetched by `fetchPinned`, which the daemon's wiring calls
/// in the background when a pin changes and at every pass of the cache bound.
extension BlockCache {
    /// What one call of `fetchPinned` did.
    public struct PinnedFetch: Sendable, Equatable {
        /// Blocks fetched and stored.
        public var fetched = 0
        /// True when it stopped at a block it could not fetch (the server unreachable,
        /// fetching held while paused or on a metered network): the rest waits for the
        /// next call.
        public var stopped = false
        /// True when more blocks of pinned files may be missing (the call's limit was reached).
        public var more = false
    }

    /// Fetches up to `limit` whole blocks that pinned files name and this device does
    /// not hold, one at a time, as non-interactive work: a reader's fetches are not
    /// queued behind a large pin, and the policy holds it like any prefetch.
    public func fetchPinned(limit: Int = 64) throws -> PinnedFetch {
        var result = PinnedFetch()
        guard remote != nil else { return result }
        let missing = try catalog.pinnedBlocksNotHeld(pinXattr: CacheBound.pinAttribute, limit: limit)
        result.more = missing.count == limit
        for block in missing {
            do {
                _ = try descriptor(block.digest, length: block.length, range: 0..<block.length, interactive: false, whole: true)
                result.fetched += 1
            } catch {
                result.stopped = true
                result.more = true
                break
            }
        }
        return result
    }
}
