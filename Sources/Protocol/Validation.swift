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
    /// with `path(bytes:)`), at most 4096 bytes. Returns it unchanged.
    public static func path(_ value: String, field: String = "path") throws(ValidationError) -> String {
        if value.isEmpty { throw ValidationError(field: field, message: "'\(field)' is empty; give a workspace path such as 'Camera Roll/IMG_0001.jpg'") }
        if value.utf8.count > 4096 { throw ValidationError(field: field, message: "'\(field)' is longer than 4096 bytes") }
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

    public static func nonNegative(_ value: Int64, field: String) throws(ValidationError) -> Int64 {
        guard value >= 0 else { throw ValidationError(field: field, message: "'\(field)' must be 0 or more, got \(value)") }
        return value
    }
}

/// A value from the network that is not acceptable; `field` names it.
public struct ValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    public let field: String
    public let message: String
    public init(field: String, message: String) { self.field = field; self.message = message }
    public var description: String { message }
}
