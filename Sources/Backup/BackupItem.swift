import Crypto
import Storage

/// What the drive hands to `BackupQueue.enqueue` for a file committed under `Camera Roll/`.
public struct CameraRollCommit: Sendable, Equatable {
    /// The drive's change sequence of this commit (monotonic across the catalog).
    public var changeSequence: Int64
    public var inode: UInt64
    /// Workspace path, e.g. "Camera Roll/2024/IMG_1.jpg".
    public var path: String
    /// The content hash (Crypto's `ContentHash.of(blocks:)`), the file's identity.
    public var hash: SHA256Digest
    public var size: Int64
    /// Seconds since the epoch.
    public var mtime: Int64
    /// The block digests the content hash is computed from, zero blocks (holes) included.
    public var blocks: [SHA256Digest]
    /// False when the drive committed this version while a writable handle stayed open on
    /// the inode (an importer that forks mid-write commits at every child's close): such a
    /// version is kept but not sent until `BackupQueue.settle` (the last writable release).
    public var settled: Bool

    public init(changeSequence: Int64, inode: UInt64, path: String, hash: SHA256Digest, size: Int64, mtime: Int64,
                blocks: [SHA256Digest], settled: Bool) {
        self.changeSequence = changeSequence; self.inode = inode; self.path = path
        self.hash = hash; self.size = size; self.mtime = mtime; self.blocks = blocks; self.settled = settled
    }

    /// What `createUpload` and the file record tell the server about this content.
    public var manifest: ContentManifest { ContentManifest(content: hash, size: size, blocks: blocks) }
}

/// The life of a queued item: pending → uploading → done | failed; failed → pending on retry.
/// A pending item that is not yet settled waits without being due (shown as "writing").
public enum BackupItemState: String, Sendable, CaseIterable, Codable {
    case pending, uploading, done, failed
}

/// One row of `backup_items`: the commit as the drive queued it (its fields read
/// through: `item.hash`, `item.path`), and where its backup stands.
@dynamicMemberLookup
public struct BackupItem: Sendable, Equatable {
    public var id: Int64
    public var commit: CameraRollCommit
    public var state: BackupItemState
    /// Done without sending: the server already had the content.
    public var linked: Bool
    /// The file record has been pushed to the server.
    public var recorded: Bool
    public var failureReason: String?
    public var attempts: Int
    public var integrityFailures: Int
    public var nextAttemptAt: Double
    public var lastError: String?
    /// Written by versions before blocks only (one URL per whole-file upload): every
    /// attempt now starts from the server's plan, which carries a URL per block.
    public var uploadURL: String?
    public var urlExpiresAt: Double?
    public var bytesSent: Int64
    public var captureDate: String?
    public var captureSource: String?

    static let columns = """
        id, change_sequence, inode, path, hash, size, mtime, state, linked, recorded, failure_reason,
        attempts, integrity_failures, next_attempt_at, last_error, upload_url, url_expires_at,
        bytes_sent, capture_date, capture_source, blocks, settled
        """

    public subscript<T>(dynamicMember field: KeyPath<CameraRollCommit, T>) -> T { commit[keyPath: field] }

    /// Pending but still being written (not settled): not due, shown as "writing".
    public var isWriting: Bool { state == .pending && !commit.settled }

    /// The word the user sees: the state, or "writing" for an unsettled pending item.
    public var shownState: String { isWriting ? "writing" : state.rawValue }

    init(row: Row) throws {
        guard let hex = row.string(4), let hash = SHA256Digest(hex: hex) else {
            throw BackupQueueError.corruptRow("backup_items id \(row.int64(0)) has no valid hash")
        }
        guard let state = row.string(7).flatMap(BackupItemState.init(rawValue:)) else {
            throw BackupQueueError.corruptRow("backup_items id \(row.int64(0)) has an unknown state")
        }
        guard let blocks = BlockListJSON.decode(row.string(20) ?? "") else {
            throw BackupQueueError.corruptRow("backup_items id \(row.int64(0)) has no valid block list")
        }
        id = row.int64(0)
        commit = CameraRollCommit(changeSequence: row.int64(1), inode: UInt64(bitPattern: row.int64(2)),
                                  path: row.string(3) ?? "", hash: hash, size: row.int64(5), mtime: row.int64(6),
                                  blocks: blocks, settled: row.int(21) != 0)
        self.state = state
        linked = row.int(8) != 0
        recorded = row.int(9) != 0
        failureReason = row.string(10)
        attempts = row.int(11)
        integrityFailures = row.int(12)
        nextAttemptAt = row.double(13)
        lastError = row.string(14)
        uploadURL = row.string(15)
        urlExpiresAt = row.isNull(16) ? nil : row.double(16)
        bytesSent = row.int64(17)
        captureDate = row.string(18)
        captureSource = row.string(19)
    }
}

public enum BackupQueueError: Error, CustomStringConvertible {
    case corruptRow(String)
    public var description: String {
        switch self { case .corruptRow(let m): return m }
    }
}
