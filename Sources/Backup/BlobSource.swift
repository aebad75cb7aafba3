import Crypto
import Storage

/// Where the uploader reads a blob from: the drive's content-addressed store.
public protocol BackupBlobSource: Sendable {
    /// Opens the blob named `digest` read-only; throws `Errno.noSuchFileOrDirectory` when missing.
    func openBlob(_ digest: SHA256Digest) throws -> Int32
}

extension BlobStore: BackupBlobSource {
    public func openBlob(_ digest: SHA256Digest) throws -> Int32 { try open(digest) }
}
