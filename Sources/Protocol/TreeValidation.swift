import Crypto

/// Checks of the workspace tree's values (Docs/sync.md). Two kinds of rule, as in the
/// rest of the API: what the OpenAPI document states (an id's pattern, a name's
/// characters, the bounds of a number) is `.invalid`, and a whole request carrying it
/// is refused (400) before anything is applied; what a JSON Schema cannot state (a name
/// of at most 255 characters but more than 255 bytes, a file without a hash, blocks that
/// do not hash to the content) is `.inconsistent`, and only that change is refused (its
/// result is 422).
extension Validation {
    /// The largest `mtime`: 2^62 nanoseconds (year 2116), far from Int64's edge so a
    /// device may add to it without overflowing.
    public static let maxTreeMtime: Int64 = 1 << 62
    /// A name's longest, in bytes of UTF-8 (Linux's NAME_MAX: a device could not hold a longer one).
    public static let maxNameBytes = 255
    /// A symlink target's longest, in bytes of UTF-8 (Linux's PATH_MAX).
    public static let maxTargetBytes = 4096

    /// A node id: exactly 32 lowercase hex digits (16 random bytes).
    public static func nodeID(_ value: String, field: String = "id") throws(ValidationError) -> String {
        let digit = UInt8(ascii: "0")...UInt8(ascii: "9"), letter = UInt8(ascii: "a")...UInt8(ascii: "f")
        guard value.utf8.count == 32, value.utf8.allSatisfy({ digit.contains($0) || letter.contains($0) }) else {
            throw ValidationError(field: field, message: "'\(field)' must be a node id of 32 lowercase hex digits (16 random bytes), got \(value.utf8.count) characters")
        }
        return value
    }

    /// A node's name: 1 to 255 characters, no `/`, no NUL, not `.` or `..` (the
    /// document's rule), and at most 255 bytes of UTF-8 (checked last, `.inconsistent`).
    public static func nodeName(_ value: String, field: String = "name") throws(ValidationError) -> String {
        try text(value, field: field, most: maxNameBytes, what: "a node's name")
        if value.utf8.contains(UInt8(ascii: "/")) { throw ValidationError(field: field, message: "'\(field)' contains '/'; a name is one path component (a folder is a node of its own)") }
        if value == "." || value == ".." { throw ValidationError(field: field, message: "'\(field)' must not be '.' or '..'") }
        return value
    }

    /// The byte rule of a name, which the document cannot state (its maxLength counts characters).
    public static func nodeNameBytes(_ value: String, field: String = "name") throws(ValidationError) -> String {
        try utf8(value, field: field, most: maxNameBytes, what: "a name has at most \(maxNameBytes) (a Linux file name's limit)")
    }

    /// A symlink's target: 1 to 4,096 characters, no NUL; its byte rule is `targetBytes`.
    public static func target(_ value: String, field: String = "target") throws(ValidationError) -> String {
        try text(value, field: field, most: maxTargetBytes, what: "a symlink's target")
        return value
    }

    public static func targetBytes(_ value: String, field: String = "target") throws(ValidationError) -> String {
        try utf8(value, field: field, most: maxTargetBytes, what: "a symlink's target has at most \(maxTargetBytes)")
    }

    /// The rules the document states of a name or a target: not empty, at most `most`
    /// characters, no NUL.
    private static func text(_ value: String, field: String, most: Int, what: String) throws(ValidationError) {
        if value.isEmpty { throw ValidationError(field: field, message: "'\(field)' is empty; \(what) has 1 to \(most) bytes") }
        if value.unicodeScalars.count > most { throw ValidationError(field: field, message: "'\(field)' is longer than \(most) characters") }
        if value.utf8.contains(0) { throw ValidationError(field: field, message: "'\(field)' contains a NUL byte") }
    }

    /// The byte rule the document cannot state: at most `most` bytes of UTF-8 (a change's 422).
    private static func utf8(_ value: String, field: String, most: Int, what: String) throws(ValidationError) -> String {
        guard value.utf8.count <= most else {
            throw ValidationError(field: field, message: "'\(field)' has \(value.utf8.count) bytes of UTF-8; \(what)",
                                  code: TreeResult.invalid, kind: .inconsistent)
        }
        return value
    }

    /// A modification time in nanoseconds since 1970: 0 to 2^62.
    public static func treeMtime(_ value: Int64, field: String = "mtime") throws(ValidationError) -> Int64 {
        guard value >= 0 && value <= maxTreeMtime else {
            throw ValidationError(field: field, message: "'\(field)' must be nanoseconds since 1970, 0 to \(maxTreeMtime), got \(value)")
        }
        return value
    }

    /// One change of `POST /v1/tree/changes`: every rule of the document first (so a
    /// change breaking one is always `.invalid`, whatever else is wrong with it), then the
    /// rules between its fields. Fields are named as in the change (`name`, `blocks.3`).
    public static func treeChange(_ change: TreeChange) throws(ValidationError) -> CheckedTreeChange {
        switch change {
        case .delete(let id, let base):
            _ = try nodeID(id)
            _ = try nonNegative(base, field: "base")
            guard id != TreeNode.rootID else { throw rootRefusal() }
            return .delete(id: id, base: base)
        case .put(var put):
            _ = try nodeID(put.id)
            _ = try nonNegative(put.base, field: "base")
            _ = try nodeID(put.parent, field: "parent")
            _ = try nodeName(put.name)
            _ = try treeMtime(put.mtime)
            if let hash = put.hash { put.hash = try self.hash(hash).hex }
            if let size = put.size { _ = try contentSize(size) }
            if let target = put.target { _ = try self.target(target) }
            if let blocks = put.blocks {
                guard blocks.count <= API.maxBlocksPerContent else {
                    throw ValidationError(field: "blocks", message: "'blocks' has \(blocks.count) entries; at most \(API.maxBlocksPerContent) (1 TiB) are accepted")
                }
                for (i, text) in blocks.enumerated() { _ = try self.hash(text, field: "blocks.\(i)") }
            }

            guard put.id != TreeNode.rootID else { throw rootRefusal() }
            _ = try nodeNameBytes(put.name)
            if let target = put.target { _ = try targetBytes(target) }
            var manifest: BlockManifest?
            switch put.kind {
            case .file:
                guard let hash = put.hash, let size = put.size else {
                    throw inconsistent(put.hash == nil ? "hash" : "size", "a file's put carries its content: 'hash' and 'size' (and 'blocks' when the server may lack it)")
                }
                if put.target != nil { throw inconsistent("target", "a file has no 'target'; only a symlink has") }
                if let blocks = put.blocks { manifest = try self.manifest(content: hash, size: size, blocks: blocks, contentField: "hash") }
                if put.executable == nil { put.executable = false }
            case .folder:
                for (field, present) in [("hash", put.hash != nil), ("size", put.size != nil), ("blocks", put.blocks != nil),
                                         ("executable", put.executable != nil), ("target", put.target != nil)] where present {
                    throw inconsistent(field, "a folder has no '\(field)'; leave it out")
                }
            case .symlink:
                guard put.target != nil else { throw inconsistent("target", "a symlink's put carries its 'target'") }
                for (field, present) in [("hash", put.hash != nil), ("size", put.size != nil), ("blocks", put.blocks != nil),
                                         ("executable", put.executable != nil)] where present {
                    throw inconsistent(field, "a symlink has no '\(field)'; leave it out")
                }
            }
            put.blocks = nil
            return .put(put, manifest: manifest)
        }
    }

    /// `POST /v1/tree/restore`: 1 to `API.maxTreeRestore` ids, or a folder and a time.
    public static func treeRestore(_ request: TreeRestoreRequest) throws(ValidationError) -> TreeRestoreRequest {
        switch request {
        case .ids(let ids):
            guard !ids.isEmpty, ids.count <= API.maxTreeRestore else {
                throw ValidationError(field: "ids", message: "'ids' has \(ids.count) entries; give 1 to \(API.maxTreeRestore) node ids")
            }
            for (i, id) in ids.enumerated() { _ = try nodeID(id, field: "ids.\(i)") }
        case .under(let id, let since):
            _ = try nodeID(id, field: "under")
            _ = try nonNegative(since, field: "since")
        }
        return request
    }

    private static func rootRefusal() -> ValidationError {
        ValidationError(field: "id", message: "the root folder (\(TreeNode.rootID)) always exists and never changes; put nodes into it instead",
                        code: TreeResult.invalid, kind: .inconsistent)
    }

    private static func inconsistent(_ field: String, _ message: String) -> ValidationError {
        ValidationError(field: field, message: message, code: TreeResult.invalid, kind: .inconsistent)
    }
}

/// A change whose values passed `Validation.treeChange`: hashes lowercase, a file's
/// `executable` filled in (false when absent), `blocks` checked into `manifest`.
public enum CheckedTreeChange: Sendable, Equatable {
    case put(TreePut, manifest: BlockManifest?)
    case delete(id: String, base: Int64)
}
