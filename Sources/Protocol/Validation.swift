import Crypto

/// Checks for values that come from the network, with messages that name the field.
public enum Validation {
    /// A hash is exactly 64 hex digits; returns it lowercased.
    public static func hash(_ value: String, field: String = "hash") throws(ValidationError) -> SHA256Digest {
        guard let digest = SHA256Digest(hex: value) else {
            throw ValidationError(field: field, message: "'\(field)' must be a SHA-256 as 64 hex digits, got \(value.utf8.count) characters")
        }
        return digest
    }

    /// A workspace path: relative, `/`-separated, no empty, `.` or `..` components,
    /// no NUL, valid UTF-8 (a Swift `String` from JSON is valid; raw bytes are checked
    /// with `path(bytes:)`), at most 4096 characters. Returns it unchanged.
    public static func path(_ value: String, field: String = "path") throws(ValidationError) -> String {
        if value.isEmpty { throw ValidationError(field: field, message: "'\(field)' is empty; give a workspace path such as 'Camera Roll/IMG_0001.jpg'") }
        // Characters (Unicode scalars), as JSON Schema's maxLength counts them, so the
        // OpenAPI document can state the limit exactly.
        if value.unicodeScalars.count > 4096 { throw ValidationError(field: field, message: "'\(field)' is longer than 4096 characters") }
        if value.utf8.contains(0) { throw ValidationError(field: field, message: "'\(field)' contains a NUL byte") }
        if value.hasPrefix("/") { throw ValidationError(field: field, message: "'\(field)' must be relative to the workspace, not start with '/'") }
        for component in value.split(separator: "/", omittingEmptySubsequences: false) {
            if component.isEmpty { throw ValidationError(field: field, message: "'\(field)' has an empty component ('//' or a trailing '/')") }
            if component == "." || component == ".." { throw ValidationError(field: field, message: "'\(field)' must not contain '.' or '..' components") }
        }
        return value
    }

    /// Raw bytes that must be valid UTF-8 before they are a path.
    public static func path(bytes: [UInt8], field: String = "path") throws(ValidationError) -> String {
        guard let s = String(validating: bytes, as: UTF8.self) else {
            throw ValidationError(field: field, message: "'\(field)' is not valid UTF-8")
        }
        return try path(s, field: field)
    }

    /// A prefix for listings: empty (everything) or a path, optionally ending in `/`.
    public static func prefix(_ value: String, field: String = "prefix") throws(ValidationError) -> String {
        if value.isEmpty { return value }
        let trimmed = value.hasSuffix("/") ? String(value.dropLast()) : value
        _ = try path(trimmed, field: field)
        return value
    }

    /// A content's manifest as sent: every block a hash (`blocks.<i>` at fault), as many
    /// blocks as `size` needs (`Blocks.count(forSize:)`), and the blocks hash to
    /// `content` (`ContentHash.of(blocks:)`; code `content_mismatch` otherwise).
    public static func manifest(content: String, size: Int64, blocks: [String], contentField: String = "content") throws(ValidationError) -> BlockManifest {
        let content = try hash(content, field: contentField)
        let size = try contentSize(size)
        guard blocks.count <= API.maxBlocksPerContent else {
            throw ValidationError(field: "blocks", message: "'blocks' has \(blocks.count) entries; at most \(API.maxBlocksPerContent) (1 TiB) are accepted")
        }
        var digests: [SHA256Digest] = []
        digests.reserveCapacity(blocks.count)
        for (i, text) in blocks.enumerated() { digests.append(try hash(text, field: "blocks.\(i)")) }
        let expected = Blocks.count(forSize: size)
        guard digests.count == expected else {
            throw ValidationError(field: "blocks", message: "a content of \(size) bytes has \(expected) blocks of up to \(Blocks.size) bytes, but 'blocks' lists \(digests.count)",
                                  kind: .inconsistent)
        }
        let actual = ContentHash.of(blocks: digests)
        guard actual == content else {
            throw ValidationError(field: contentField, message: "the blocks hash to the content hash \(actual.hex), not \(content.hex): the content hash is the SHA-256 of the block digests (Docs/protocol.md), not of the bytes",
                                  code: "content_mismatch", kind: .inconsistent)
        }
        return BlockManifest(content: content, size: size, blocks: digests)
    }

    /// A content's size: 0 to `API.maxContentSize` (1 TiB, the most a block list can describe).
    public static func contentSize(_ value: Int64, field: String = "size") throws(ValidationError) -> Int64 {
        guard value >= 0 && value <= API.maxContentSize else {
            throw ValidationError(field: field, message: "'\(field)' must be 0 to \(API.maxContentSize) bytes (1 TiB), got \(value)")
        }
        return value
    }

    public static func nonNegative(_ value: Int64, field: String) throws(ValidationError) -> Int64 {
        guard value >= 0 else { throw ValidationError(field: field, message: "'\(field)' must be 0 or more, got \(value)") }
        return value
    }
}

/// A value from the network that is not acceptable; `field` names it, `code` is the
/// error code of the reply (`bad_request` unless a more telling one exists).
public struct ValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Which rule a value broke, which decides the reply's status.
    public enum Kind: Sendable, Equatable {
        /// A rule the OpenAPI document states (type, pattern, bounds): 400.
        case invalid
        /// Values that each fit the document but contradict one another (blocks that do
        /// not hash to the content hash, a block count that does not fit the size): a JSON
        /// Schema cannot state these, so they are 422, never 400 (Docs/protocol.md).
        case inconsistent
    }
    public let field: String
    public let message: String
    public let code: String
    public let kind: Kind
    public init(field: String, message: String, code: String = "bad_request", kind: Kind = .invalid) {
        self.field = field; self.message = message; self.code = code; self.kind = kind
    }
    public var description: String { message }
    /// The HTTP status of a reply refusing the value.
    public var status: Int { kind == .inconsistent ? 422 : 400 }
}

/// A content's identity and block list, checked (`Validation.manifest`) or computed
/// (`ContentHasher`): `content == ContentHash.of(blocks:)` and the count fits `size`.
public struct BlockManifest: Sendable, Equatable, Hashable {
    public var content: SHA256Digest
    public var size: Int64
    public var blocks: [SHA256Digest]
    public init(content: SHA256Digest, size: Int64, blocks: [SHA256Digest]) { self.content = content; self.size = size; self.blocks = blocks }

    /// The length of block `index` (every block but the last is `Blocks.size`).
    public func length(ofBlock index: Int) -> Int { Blocks.length(ofBlock: index, fileSize: size) }

    /// True when block `index` is all zeros: never stored or sent, always present.
    public func isZero(_ index: Int) -> Bool { Blocks.isZero(blocks[index], length: length(ofBlock: index)) }
}
