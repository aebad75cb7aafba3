import Crypto

/// How the drive reaches content it does not hold: blocks of files backed up by any
/// device (the `Backups/` tree, online-only originals, a damaged local block), fetched
/// from the workspace server. The drive imports no HTTP: the daemon's wiring
/// (Sources/DeviceWiring) implements this with the Client, and tests with a fake.
///
/// Nothing returned here is trusted: the drive checks every byte against a digest it
/// already holds (a block's SHA-256, or one of its chunk digests) before serving it.
public protocol RemoteContent: AnyObject, Sendable {
    /// Bytes `[offset, offset + length)` of the block whose SHA-256 is `hash`.
    /// `interactive` is true when a user's read waits for it (always allowed), false for
    /// prefetch and bulk work (held while backups are paused or the network is metered).
    func blockBytes(_ hash: SHA256Digest, offset: Int, length: Int, interactive: Bool) throws(RemoteFailure) -> [UInt8]

    /// The whole block `hash`, written to `fd` from offset 0 as it arrives (nil: written
    /// nowhere); every piece is also handed to `piece` (the drive hashes them, and keeps
    /// them in memory when `fd` is nil). `direct`: the same file opened with O_DIRECT, to
    /// write past the page cache. Returns the bytes received.
    func wholeBlock(_ hash: SHA256Digest, into fd: Int32?, direct: Int32?, interactive: Bool,
                    piece: (UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) -> Int

    /// The SHA-256 of each `Blocks.chunkSize` piece of block `hash`, in order (the last
    /// may be shorter). Lets a partial read be verified without fetching the whole block.
    func chunkDigests(_ hash: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest]

    /// Several whole blocks in one exchange (small files fetched ahead), each handed to
    /// `each` as it arrives, in the order asked. Not trusted either: the drive checks
    /// every block against its digest. A remote that has no such exchange answers each
    /// block on its own (the extension below).
    func wholeBlocks(_ hashes: [SHA256Digest], interactive: Bool,
                     each: (SHA256Digest, UnsafeRawBufferPointer) -> Void) throws(RemoteFailure)

    /// Which of these file contents the server holds whole now (every block verified).
    /// Asked right before a backed-up original is made online-only: the local copy goes
    /// only when the server says, at that moment, that it can give it back.
    func presentContents(_ contents: [SHA256Digest]) throws(RemoteFailure) -> Set<SHA256Digest>
}

/// Why a remote fetch did not return bytes. The message is for the one log line the
/// drive writes; the reader gets EIO (unavailable) or ENOENT-like EIO (missing).
public enum RemoteFailure: Error, Sendable, Equatable {
    /// The server is unreachable, refused, or did not answer within the timeout.
    case unavailable(String)
    /// The server answered that it does not hold this block.
    case missing(String)
    /// Policy holds non-interactive transfers (paused, metered).
    case held(String)
    /// The server answered, but not with the block: a refused token, a redirect the
    /// client will not follow, a reply of the wrong length. Said as it is, not as "missing".
    case refused(String)
}

extension RemoteContent {
    public func wholeBlocks(_ hashes: [SHA256Digest], interactive: Bool,
                            each: (SHA256Digest, UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) {
        for hash in hashes {
            var bytes: [UInt8] = []
            _ = try wholeBlock(hash, into: nil, direct: nil, interactive: interactive) { bytes.append(contentsOf: $0) }
            bytes.withUnsafeBytes { each(hash, $0) }
        }
    }
}
