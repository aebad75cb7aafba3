import Drive

/// A node of the workspace tree as the server last described it (Docs/sync.md): the
/// mirror's own terms, free of the wire's encoding (the wiring translates).
public struct RemoteNode: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable { case file, folder, symlink }

    /// The root folder's id: it always exists and is the drive's root.
    public static let rootID = String(repeating: "0", count: 32)

    public var id: String
    public var parent: String
    public var name: String
    public var kind: Kind
    /// A file's content hash (hex), nil for other kinds.
    public var hash: String?
    public var size: Int64
    /// Nanoseconds since 1970; 0 for a folder, whose time is each device's own.
    public var mtime: Int64
    public var executable: Bool
    public var target: String?
    public var version: Int64
    public var deleted: Bool
    /// The device that made the last change (for conflict names), when the server says.
    public var device: String?
    /// A file's block list (hex), when the feed brought it (small files): applying the
    /// node then needs no question of its own. Checked against `hash` before use.
    public var blocks: [String]?

    public init(id: String, parent: String, name: String, kind: Kind, hash: String? = nil, size: Int64 = 0, mtime: Int64 = 0,
                executable: Bool = false, target: String? = nil, version: Int64 = 0, deleted: Bool = false, device: String? = nil,
                blocks: [String]? = nil) {
        self.id = id; self.parent = parent; self.name = name; self.kind = kind; self.hash = hash; self.size = size
        self.mtime = mtime; self.executable = executable; self.target = target; self.version = version
        self.deleted = deleted; self.device = device; self.blocks = blocks
    }

    /// The time a device gives the node when it makes it: a folder's is the time it is
    /// made there, as a `mkdir` of its own would give it (the server has none for it).
    public var mtimeWhenMade: Int64? { kind == .folder ? nil : mtime }

    /// Same place, kind, content and attributes (versions and authors aside).
    public func sameState(as other: RemoteNode) -> Bool {
        parent == other.parent && name == other.name && kind == other.kind && hash == other.hash && size == other.size
            && mtime == other.mtime && executable == other.executable && target == other.target && deleted == other.deleted
    }
}

/// One page of the tree's feed.
public struct RemotePage: Sendable {
    public var nodes: [RemoteNode]
    public var next: Int64
    public var latest: Int64
    public var workspace: String?
    public init(nodes: [RemoteNode], next: Int64, latest: Int64, workspace: String?) {
        self.nodes = nodes; self.next = next; self.latest = latest; self.workspace = workspace
    }
}

/// A change the device asks of the server, based on the version it last saw.
public enum NodeChange: Sendable, Equatable {
    /// The node's whole new state (`base` 0: a create). `blocks`: the content's block
    /// list, for a content the server may not have recorded yet.
    case put(RemoteNode, base: Int64, blocks: [String]?)
    case delete(id: String, base: Int64)

    public var id: String {
        switch self {
        case .put(let node, _, _): return node.id
        case .delete(let id, _): return id
        }
    }
}

/// What the server answered to one change.
public enum ChangeOutcome: Sendable, Equatable {
    case applied(RemoteNode)
    /// The base was not current: the node as it is now.
    case conflict(RemoteNode)
    /// Another node has that name in that folder.
    case nameTaken(RemoteNode?)
    /// The move would put a folder inside itself.
    case cycle(RemoteNode?)
    /// A folder delete refused: it still has children (someone added one).
    case notEmpty(RemoteNode?)
    /// The parent is unknown to the server, purged, or not a folder: the server's reason.
    case parentMissing(String)
    /// The content is not on the server yet: send it (the blocks the server named, or
    /// all of them when it named none), then the change again.
    case contentMissing([String])
    /// The workspace is over its quota.
    case serverFull
    /// Refused for good (a name or value the server does not accept): the reason.
    case refused(String)
}

/// A content to make present on the server.
public struct OutgoingContent: Sendable, Equatable {
    public var content: String
    public var size: Int64
    /// Every block (hex) in order, zero blocks included.
    public var blocks: [String]
    /// The blocks the server said it lacks; empty: it did not say (send what it asks for).
    public var missing: [String]
    public init(content: String, size: Int64, blocks: [String], missing: [String]) {
        self.content = content; self.size = size; self.blocks = blocks; self.missing = missing
    }
}

/// The workspace server, as the mirror needs it (implemented by the wiring over the
/// client; the mirror imports no HTTP).
public protocol MirrorServer: Sendable {
    /// The feed from `since`, held up to `wait` seconds when nothing is newer; given up
    /// (throwing) soon after `stop` answers true.
    func page(since: Int64, wait: Int, stop: @escaping @Sendable () -> Bool) throws -> RemotePage
    /// Sends changes in order; one outcome each.
    func send(_ changes: [NodeChange]) throws -> [ChangeOutcome]
    /// Makes contents present on the server: sends the blocks it lacks, reading each
    /// through `open`: a descriptor of the block's bytes alone (this method closes it),
    /// or a small block's bytes.
    /// Given up (throwing) soon after `stop` answers true; sent again later, it resumes.
    /// A content whose block `open` could not give is left out, the others sent: returns
    /// those left out, with why.
    func sendContents(_ contents: [OutgoingContent], open: (String) throws -> StoredBlock,
                      stop: @escaping @Sendable () -> Bool) throws -> [String: String]
    /// A content's block list (hex), zero blocks included.
    func blockList(of content: String) throws -> [String]
    /// Those of `contents` (hex) whose manifest the workspace holds: recording them sends
    /// no bytes.
    func presentContents(_ contents: [String]) throws -> Set<String>
}
