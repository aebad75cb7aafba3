import Crypto

/// How the drive learns what the workspace server holds: every device's backed-up
/// versions, in the server's change-feed order, and the block list of a content. The
/// drive imports no HTTP: the daemon's wiring (Sources/DeviceWiring) implements this with
/// the Client, and tests with a fake.
///
/// Learning the records at mount is the feed from where this drive stopped (0 the first
/// time): the feed holds every version the server keeps, older ones included, which the
/// listing of current files (`GET /v1/files`) does not.
public protocol RemoteRecords: AnyObject, Sendable {
    /// The entries after server sequence `since`, in order, at most `limit`.
    func changes(since: Int64, limit: Int) throws(RemoteFailure) -> RemoteChangePage
    /// The same, held by the server up to `wait` seconds when nothing is newer (a long
    /// poll), and given up soon after `cancelled` answers true.
    func changes(since: Int64, limit: Int, wait: Int, cancelled: @escaping @Sendable () -> Bool) throws(RemoteFailure) -> RemoteChangePage
    /// The SHA-256 of each 4 MiB block of `content`, in order, zero blocks included.
    /// Not trusted: the drive checks the list against the content hash and size.
    func blockList(of content: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest]
}

extension RemoteRecords {
    /// A remote that cannot hold a request answers at once.
    public func changes(since: Int64, limit: Int, wait: Int, cancelled: @escaping @Sendable () -> Bool) throws(RemoteFailure) -> RemoteChangePage {
        try changes(since: since, limit: limit)
    }
}

/// One version of a file backed up by a device, as the server recorded it.
public struct RemoteVersion: Sendable, Equatable {
    /// The server's sequence: the version's position in the change feed.
    public var sequence: Int64
    public var device: String
    /// The path on that device, e.g. `Camera Roll/IMG_0001.jpg`.
    public var path: String
    public var content: SHA256Digest
    public var size: Int64
    /// Unix seconds (EXIF DateTimeOriginal, else the file's mtime when it was backed up).
    public var captureDate: Int64?
    public var mtime: Int64
    /// When the server recorded it, Unix seconds (nil for records older than versions).
    public var recordedAt: Int64?

    public init(sequence: Int64, device: String, path: String, content: SHA256Digest, size: Int64,
                captureDate: Int64?, mtime: Int64, recordedAt: Int64?) {
        self.sequence = sequence; self.device = device; self.path = path; self.content = content
        self.size = size; self.captureDate = captureDate; self.mtime = mtime; self.recordedAt = recordedAt
    }

    /// The date `Backups/` files by and shows as mtime: the capture date, else the mtime.
    public var shownDate: Int64 { captureDate ?? mtime }
}

/// One entry of the change feed.
public enum RemoteChange: Sendable, Equatable {
    /// A new version (or a version re-recorded with new metadata: the server then
    /// dropped the same content's previous row, and so does the drive).
    case recorded(RemoteVersion)
    /// The administrator deleted the version with sequence `version`.
    case deleted(sequence: Int64, version: Int64)

    public var sequence: Int64 {
        switch self {
        case .recorded(let v): return v.sequence
        case .deleted(let s, _): return s
        }
    }
}

/// A page of the feed: its entries in sequence order, and where the next page starts.
public struct RemoteChangePage: Sendable, Equatable {
    public var changes: [RemoteChange]
    public var nextSequence: Int64
    /// The highest sequence the server has handed out (nil: an older server that does
    /// not say). Below the drive's cursor: the server forgot part of its feed.
    public var latestSequence: Int64?
    /// The workspace's identity (nil: an older server that does not say). Another one
    /// than the drive's records came from: the address reaches another workspace now.
    public var workspace: String?
    public init(changes: [RemoteChange], nextSequence: Int64, latestSequence: Int64? = nil, workspace: String? = nil) {
        self.changes = changes; self.nextSequence = nextSequence; self.latestSequence = latestSequence
        self.workspace = workspace
    }
}
