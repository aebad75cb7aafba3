import Foundation

/// Regular expressions that are both the OpenAPI document's `pattern` for a value and
/// the server's check of it: one string, so what the document says and what the server
/// enforces cannot drift apart. Written in the subset where ECMA-262 (JSON Schema),
/// ICU (`NSRegularExpression`, here) and Python (the contract test's generator) agree:
/// character classes, groups, bounded repeats, no lookaround.
enum WirePatterns {
    /// Standard base64 (RFC 4648, padded) of any length.
    private static let base64 = "([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
    /// Standard base64 of 32 bytes (a raw SHA-256).
    static let base64Digest = "[A-Za-z0-9+/]{43}="
    /// Standard base64 of 64 bytes (a SHA-256 as 64 hex digits, as most tus clients send it).
    private static let base64HexDigest = "[A-Za-z0-9+/]{86}=="

    /// tus `Upload-Metadata`: comma-separated `key[ base64]` pairs, one of them
    /// `sha256 <base64 of the block hash>` (the first such pair is the one used).
    static let uploadMetadata: String = {
        let pair = "[A-Za-z0-9._~-]+( \(base64))?"
        return "^(\(pair),)*sha256 (\(base64Digest)|\(base64HexDigest))(,\(pair))*$"
    }()

    /// tus `Upload-Length` of one block: a decimal integer from 1 to 4194304, no sign or
    /// leading zero. A string pattern, not an integer schema with bounds, because a header
    /// is text on the wire and the contract test's generator re-reads integer headers as
    /// strings. (1–999999, 1000000–3999999, 4000000–4099999, 4100000–4189999,
    /// 4190000–4193999, 4194000–4194299, 4194300–4194304.)
    static let uploadLength = "^([1-9][0-9]{0,5}|[1-3][0-9]{6}|40[0-9]{5}|41[0-8][0-9]{4}|419[0-3][0-9]{3}|4194[0-2][0-9]{2}|419430[0-4])$"

    /// tus `Upload-Checksum`: `sha256 <base64 of the 32-byte digest>`.
    static let uploadChecksum = "^sha256 \(base64Digest)$"

    /// A workspace path component: not empty, no `/` or NUL, not `.` or `..`.
    private static let component = #"([^/\u0000.][^/\u0000]*|\.[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+)"#
    /// A workspace path: relative, components joined by single `/`s (`Validation.path`).
    static let path = "^\(component)(/\(component))*$"
    /// A node's name in the workspace tree: one path component (`Validation.nodeName`).
    static let nodeName = "^\(component)$"
    /// A node id: 32 lowercase hex digits (`Validation.nodeID`).
    static let nodeID = "^[0-9a-f]{32}$"
    /// A symlink's target: no NUL (`Validation.target`).
    static let target = #"^[^\u0000]+$"#
    /// A listing prefix: empty, or a path, optionally ending in `/` (`Validation.prefix`).
    static let prefix = "^(\(component)(/\(component))*/?)?$"

    /// True when the whole of `value` matches `pattern` (the patterns are anchored).
    static func matches(_ pattern: String, _ value: String) -> Bool {
        compiled(pattern).firstMatch(in: value, options: [], range: NSRange(value.startIndex..., in: value)) != nil
    }

    /// `pattern` as a JSON string literal, for the OpenAPI document.
    static func json(_ pattern: String) -> String {
        "\"" + pattern.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    private static let cache = CompiledPatterns()

    private static func compiled(_ pattern: String) -> NSRegularExpression { cache.get(pattern) }
}

/// Compiled expressions, made once each. `@unchecked Sendable`: the dictionary is only
/// touched under `lock`, and `NSRegularExpression` is immutable and thread-safe.
private final class CompiledPatterns: @unchecked Sendable {
    private let lock = NSLock()
    private var table: [String: NSRegularExpression] = [:]

    func get(_ pattern: String) -> NSRegularExpression {
        lock.lock()
        defer { lock.unlock() }
        if let r = table[pattern] { return r }
        // The patterns are constants of this file; one that does not compile is a bug.
        let r = try! NSRegularExpression(pattern: pattern)
        table[pattern] = r
        return r
    }
}
