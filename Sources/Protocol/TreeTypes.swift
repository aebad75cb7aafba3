/// The workspace tree on the wire (Docs/sync.md, "Wire format"): nodes with stable ids
/// whose path is an attribute (a parent's id and a name), the changes a device sends,
/// and what the server answers for each. Versions are one increasing series of the
/// tree's own, handed out in commit order.
import Foundation

extension API {
    /// `GET /v1/tree?since=&limit=&wait=`: the nodes changed after a version, parents first.
    public static let tree = "/v1/tree"
    /// `POST /v1/tree/changes`: puts and deletes, each applied on its own.
    public static let treeChanges = "/v1/tree/changes"
    /// `GET /v1/tree/trash?after=&limit=`: deleted nodes not yet purged, newest first.
    public static let treeTrash = "/v1/tree/trash"
    /// `POST /v1/tree/restore`: nodes back from the trash.
    public static let treeRestore = "/v1/tree/restore"
    /// `/v1/tree/nodes/<id>/versions`: every content a file node has had.
    public static let treeNodePrefix = "/v1/tree/nodes/"
    public static let versionsSuffix = "/versions"

    /// At most this many nodes in order per tree page (the ancestors they need come on top).
    public static let maxTreePage = 5_000
    /// At most this many changes per `POST /v1/tree/changes`.
    public static let maxTreeChanges = 1_000
    /// A file of at most this many blocks (64 MiB) comes in the feed with its block list.
    public static let feedBlockListBlocks = 16
    /// At most this many ids per restore, and entries per trash page.
    public static let maxTreeRestore = 1_000
    public static let maxTrashPage = 5_000
    /// The longest a `GET /v1/tree` may be held waiting for a change, seconds.
    public static let maxTreeWait = 60
}

/// A node's kind; it never changes.
public enum TreeNodeKind: String, Codable, Sendable, CaseIterable {
    case file, folder, symlink
}

/// A node as the server keeps it. `hash` and `size` are a file's (nil otherwise, and
/// for a purged node), `executable` a file's, `target` a symlink's. `version` is the
/// tree version of its last change. A node in the trash has `deleted` with `deletedAt`
/// (seconds) and `deletedBy` (a device name).
public struct TreeNode: Codable, Sendable, Equatable, Hashable {
    public var id: String
    public var parent: String
    public var name: String
    public var kind: TreeNodeKind
    public var hash: String?
    public var size: Int64?
    /// Nanoseconds since 1970.
    public var mtime: Int64
    public var executable: Bool?
    public var target: String?
    public var version: Int64
    public var deleted: Bool
    public var deletedAt: Int64?
    public var deletedBy: String?
    /// The device that made the last change, and when (server time, seconds).
    public var device: String
    public var changedAt: Int64
    /// The feed only, for a live file of at most `API.feedBlockListBlocks` blocks: its
    /// content's block list (hex, zero blocks included), so a device applying many small
    /// files does not ask for each list on its own.
    public var blocks: [String]?

    public init(id: String, parent: String, name: String, kind: TreeNodeKind, hash: String? = nil, size: Int64? = nil, mtime: Int64,
                executable: Bool? = nil, target: String? = nil, version: Int64, deleted: Bool = false, deletedAt: Int64? = nil,
                deletedBy: String? = nil, device: String, changedAt: Int64, blocks: [String]? = nil) {
        self.id = id; self.parent = parent; self.name = name; self.kind = kind; self.hash = hash; self.size = size; self.mtime = mtime
        self.executable = executable; self.target = target; self.version = version; self.deleted = deleted; self.deletedAt = deletedAt
        self.deletedBy = deletedBy; self.device = device; self.changedAt = changedAt; self.blocks = blocks
    }

    /// The root folder's id: it always exists, is a folder and never changes.
    public static let rootID = "00000000000000000000000000000000"
}

/// `GET /v1/tree`: nodes changed after `since`, in version order except that a node
/// never comes before its parent (its ancestors changed after `since` come first, even
/// from beyond this page; they come again at their own place).
public struct TreePage: Codable, Sendable, Equatable {
    public var nodes: [TreeNode]
    /// Pass as `since` next time: the version of the last node at its own place (an
    /// ancestor sent ahead does not count); `since` when the page is empty.
    public var next: Int64
    /// The highest version the server handed out. A `since` above it means the server
    /// forgot part of its tree (reset, restored from an older copy): read it again from 0.
    public var latest: Int64
    /// The workspace's identity (as the change feed's): another value than last time
    /// means another workspace, or a reset server: read the tree again from 0.
    public var workspace: String
    /// The highest sequence of the backup records' feed (`GET /v1/changes`'s
    /// `latestSequence`), when the request named its cursor there (`records_since`); nil
    /// otherwise, and from a server that does not watch that feed with the tree's.
    public var recordsLatest: Int64?
    public init(nodes: [TreeNode], next: Int64, latest: Int64, workspace: String, recordsLatest: Int64? = nil) {
        self.nodes = nodes; self.next = next; self.latest = latest; self.workspace = workspace; self.recordsLatest = recordsLatest
    }
}

/// A put: the node's whole new state. `base` is the version the device last saw of it
/// (0: the device creates it). `blocks` is sent when the server may lack the content.
public struct TreePut: Sendable, Equatable {
    public var id: String
    public var base: Int64
    public var parent: String
    public var name: String
    public var kind: TreeNodeKind
    public var hash: String?
    public var size: Int64?
    public var blocks: [String]?
    public var mtime: Int64
    public var executable: Bool?
    public var target: String?

    public init(id: String, base: Int64, parent: String, name: String, kind: TreeNodeKind, hash: String? = nil, size: Int64? = nil,
                blocks: [String]? = nil, mtime: Int64, executable: Bool? = nil, target: String? = nil) {
        self.id = id; self.base = base; self.parent = parent; self.name = name; self.kind = kind; self.hash = hash; self.size = size
        self.blocks = blocks; self.mtime = mtime; self.executable = executable; self.target = target
    }
}

/// One change of `POST /v1/tree/changes`: a put, or a delete (to the trash).
public enum TreeChange: Sendable, Equatable {
    case put(TreePut)
    case delete(id: String, base: Int64)

    public var id: String {
        switch self {
        case .put(let p): return p.id
        case .delete(let id, _): return id
        }
    }

    public static let putFields = ["op", "id", "base", "parent", "name", "kind", "hash", "size", "blocks", "mtime", "executable", "target"]
    public static let deleteFields = ["op", "id", "base"]
}

extension TreeChange: Codable {
    private enum Keys: String, CodingKey {
        case op, id, base, parent, name, kind, hash, size, blocks, mtime, executable, target
    }

    /// Strict, as every request body the server reads: a field the operation does not
    /// have is refused, and so is `null` where a field may only be absent (the OpenAPI
    /// document declares none of them nullable).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        let op = try c.decode(String.self, forKey: .op)
        switch op {
        case "delete":
            try WireJSON.refuseUnknownFields(decoder, known: Self.deleteFields)
            self = .delete(id: try c.decode(String.self, forKey: .id), base: try c.decode(Int64.self, forKey: .base))
        case "put":
            try WireJSON.refuseUnknownFields(decoder, known: Self.putFields)
            func optional<T: Decodable>(_ type: T.Type, _ key: Keys) throws -> T? {
                guard c.contains(key) else { return nil }
                if try c.decodeNil(forKey: key) {
                    throw DecodingError.valueNotFound(T.self, .init(codingPath: c.codingPath + [key], debugDescription: "null; leave the field out instead"))
                }
                return try c.decode(T.self, forKey: key)
            }
            guard let kind = TreeNodeKind(rawValue: try c.decode(String.self, forKey: .kind)) else {
                throw DecodingError.dataCorruptedError(forKey: .kind, in: c, debugDescription: "kind must be file, folder or symlink")
            }
            self = .put(TreePut(id: try c.decode(String.self, forKey: .id), base: try c.decode(Int64.self, forKey: .base),
                                parent: try c.decode(String.self, forKey: .parent), name: try c.decode(String.self, forKey: .name), kind: kind,
                                hash: try optional(String.self, .hash), size: try optional(Int64.self, .size), blocks: try optional([String].self, .blocks),
                                mtime: try c.decode(Int64.self, forKey: .mtime), executable: try optional(Bool.self, .executable),
                                target: try optional(String.self, .target)))
        default:
            throw DecodingError.dataCorruptedError(forKey: .op, in: c, debugDescription: "op must be put or delete, got '\(op.prefix(40))'")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        switch self {
        case .delete(let id, let base):
            try c.encode("delete", forKey: .op)
            try c.encode(id, forKey: .id)
            try c.encode(base, forKey: .base)
        case .put(let p):
            try c.encode("put", forKey: .op)
            try c.encode(p.id, forKey: .id)
            try c.encode(p.base, forKey: .base)
            try c.encode(p.parent, forKey: .parent)
            try c.encode(p.name, forKey: .name)
            try c.encode(p.kind.rawValue, forKey: .kind)
            try c.encodeIfPresent(p.hash, forKey: .hash)
            try c.encodeIfPresent(p.size, forKey: .size)
            try c.encodeIfPresent(p.blocks, forKey: .blocks)
            try c.encode(p.mtime, forKey: .mtime)
            try c.encodeIfPresent(p.executable, forKey: .executable)
            try c.encodeIfPresent(p.target, forKey: .target)
        }
    }
}

/// `POST /v1/tree/changes` request: 1 to `API.maxTreeChanges` changes.
public struct TreeChangesRequest: Codable, Sendable {
    public var changes: [TreeChange]
    public init(changes: [TreeChange]) { self.changes = changes }

    private enum CodingKeys: String, CodingKey, CaseIterable { case changes }

    public init(from decoder: any Decoder) throws {
        try WireJSON.refuseUnknownFields(decoder, known: CodingKeys.allCases.map(\.rawValue))
        changes = try decoder.container(keyedBy: CodingKeys.self).decode([TreeChange].self, forKey: .changes)
    }
}

/// What became of one change. `status` 200 (applied, or already so), 201 (created),
/// 409 (`error`: conflict, name_taken, cycle, not_empty, parent_missing, kind_conflict,
/// missing_blocks, content_missing, size_conflict) or 422 (`invalid`, `content_mismatch`:
/// the change itself breaks a rule; `field` names it). `node` is the node as it now is
/// (the one in the way for `name_taken`); `missing` the blocks of `missing_blocks`.
public struct TreeResult: Codable, Sendable, Equatable {
    public var status: Int
    public var node: TreeNode?
    public var error: String?
    public var message: String?
    public var field: String?
    public var missing: [String]?
    public init(status: Int, node: TreeNode? = nil, error: String? = nil, message: String? = nil, field: String? = nil, missing: [String]? = nil) {
        self.status = status; self.node = node; self.error = error; self.message = message; self.field = field; self.missing = missing
    }

    /// The result's outcome codes.
    public static let conflict = "conflict", nameTaken = "name_taken", cycle = "cycle", notEmpty = "not_empty",
                      parentMissing = "parent_missing", kindConflict = "kind_conflict", invalid = "invalid"
}

/// `POST /v1/tree/changes` reply: one result per change, in order.
public struct TreeChangesResponse: Codable, Sendable, Equatable {
    public var results: [TreeResult]
    public init(results: [TreeResult]) { self.results = results }
}

/// One entry of the trash: a deleted node and its path when it was deleted.
public struct TrashEntry: Codable, Sendable, Equatable {
    public var node: TreeNode
    public var path: String
    public init(node: TreeNode, path: String) { self.node = node; self.path = path }
}

/// `GET /v1/tree/trash`: newest deletion first; `next` (the `after` of the next page)
/// when more may follow, nil on the last page.
public struct TrashPage: Codable, Sendable, Equatable {
    public var trash: [TrashEntry]
    public var next: Int64?
    public init(trash: [TrashEntry], next: Int64?) { self.trash = trash; self.next = next }
}

/// `POST /v1/tree/restore`: `ids` (1 to `API.maxTreeRestore`), or everything deleted
/// `under` a folder at or after `since` (seconds).
public enum TreeRestoreRequest: Sendable, Equatable {
    case ids([String])
    case under(String, since: Int64)
}

extension TreeRestoreRequest: Codable {
    private enum Keys: String, CodingKey { case ids, under, since }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        if c.contains(.ids) {
            try WireJSON.refuseUnknownFields(decoder, known: ["ids"])
            self = .ids(try c.decode([String].self, forKey: .ids))
        } else {
            try WireJSON.refuseUnknownFields(decoder, known: ["under", "since"])
            self = .under(try c.decode(String.self, forKey: .under), since: try c.decode(Int64.self, forKey: .since))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Keys.self)
        switch self {
        case .ids(let ids): try c.encode(ids, forKey: .ids)
        case .under(let id, let since):
            try c.encode(id, forKey: .under)
            try c.encode(since, forKey: .since)
        }
    }
}

/// A node a restore could not bring back, and why (`error`: `unknown`, `not_deleted`,
/// `purged`, `parent_missing`).
public struct RestoreSkip: Codable, Sendable, Equatable {
    public var id: String
    public var error: String
    public var message: String
    public init(id: String, error: String, message: String) { self.id = id; self.error = error; self.message = message }
}

/// `POST /v1/tree/restore` reply: the nodes brought back (trashed ancestors included,
/// parents first), each with a new version, and the ids left where they were.
public struct TreeRestoreResponse: Codable, Sendable, Equatable {
    public var nodes: [TreeNode]
    public var skipped: [RestoreSkip]
    public init(nodes: [TreeNode], skipped: [RestoreSkip]) { self.nodes = nodes; self.skipped = skipped }
}

/// One content a file node has had.
public struct TreeVersion: Codable, Sendable, Equatable {
    /// The tree version of the change that gave the node this content.
    public var sequence: Int64
    public var hash: String
    public var size: Int64
    public var mtime: Int64
    public var device: String
    public var recordedAt: Int64
    public init(sequence: Int64, hash: String, size: Int64, mtime: Int64, device: String, recordedAt: Int64) {
        self.sequence = sequence; self.hash = hash; self.size = size; self.mtime = mtime; self.device = device; self.recordedAt = recordedAt
    }
}

/// `GET /v1/tree/nodes/<id>/versions`: oldest first (empty for a folder, a symlink, or
/// a purged node).
public struct TreeVersionsResponse: Codable, Sendable, Equatable {
    public var versions: [TreeVersion]
    public init(versions: [TreeVersion]) { self.versions = versions }
}
