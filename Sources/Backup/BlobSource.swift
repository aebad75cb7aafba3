import Crypto
import Storage

/// Where the uploader reads blocks from: the drive's content-addressed store, which keeps
/// each non-zero block of every file at `<blocks root>/ab/<hex>` (Storage's `BlobStore`).
public protocol BackupBlobSource: Sendable {
    /// Opens the block named `digest` read-only; throws `Errno.noSuchFileOrDirectory` when missing.
    func openBlock(_ digest: SHA256Digest) throws -> Int32
}

extension BlobStore: BackupBlobSource {
    public func openBlock(_ digest: SHA256Digest) throws -> Int32 { try open(digest) }
}
