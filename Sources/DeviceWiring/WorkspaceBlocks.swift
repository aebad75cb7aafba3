import Backup
import Crypto
import Drive

/// The backup reads blocks as the drive keeps them: block files, and small blocks held
/// in the catalog (`StoredBlocks`, Sources/Drive/InlineBlocks.swift).
public struct WorkspaceBlocks: BackupBlobSource {
    let stored: StoredBlocks

    public init(stored: StoredBlocks) { self.stored = stored }

    public func openBlock(_ digest: SHA256Digest) throws -> Int32 { try stored.open(digest) }
}
