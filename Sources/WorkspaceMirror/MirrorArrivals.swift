import Crypto

/// Told of each file content the mirror brought down from the server: its blocks are
/// named in the catalog but not held here yet (they are fetched when read). The
/// daemon's wiring implements it with the drive's prefetch, so that a small file made
/// on another device reads at once here. Called on the mirror's worker thread after
/// the change committed; it must return quickly (start work, do not do it).
public protocol MirrorArrivals: AnyObject, Sendable {
    /// The contents one pass brought, together (so that many small files can be fetched
    /// in a few exchanges): each file's block list and size.
    func contentsArrived(_ contents: [(blocks: [SHA256Digest], size: Int64)])
}
