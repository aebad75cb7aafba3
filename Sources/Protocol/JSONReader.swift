/// JSON read straight from bytes into the types that come by the thousand (tree pages,
/// the results of a batch of changes): no intermediate tree, no coding paths. JSONDecoder
/// spent 20-30 µs a node there (Docs/benchmarks.md).
///
/// Strict where it matters to a reader: valid UTF-8, no control characters in strings,
/// whole numbers that fit an `Int64` (no fraction, no exponent), nesting at most
/// `maxDepth` deep, nothing after the value. Unknown members are skipped, as the
/// synthesized `Decodable` conformances skip them; `null` for an optional is nil.
/// Malformed input throws `JSONReader.Failure`; it never traps.
public struct JSONReader {
    public struct Failure: Error, CustomStringConvertible {
        /// The member at fault as a dotted path (`changes.3.size`), when known.
        public let field: String?
        public let message: String
        /// True when the bytes are not JSON at all (rather than JSON of the wrong shape).
        public let syntax: Bool
        public init(field: String? = nil, _ message: String, syntax: Bool = false) {
            self.field = field; self.message = message; self.syntax = syntax
        }
        public var description: String { message }
    }

    public static let maxDepth = 64

    private let bytes: [UInt8]
    private var i = 0
    private var depth = 0

    private init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Reads `bytes` as one JSON value with `body`, which must consume it all.
    public static func read<T>(_ bytes: [UInt8], _ body: (inout JSONReader) throws -> T) throws -> T {
        var r = JSONReader(bytes)
        let value = try body(&r)
        r.skipSpace()
        if r.i != bytes.count { throw r.fail("unexpected bytes after the JSON value") }
        return value
    }

    /// A Failure naming the byte offset.
    public func fail(_ message: String) -> Failure { Failure("\(message) (at byte \(i))", syntax: true) }

    /// A Failure for a required member that was absent.
    public func missing(_ key: String) -> Failure { Failure(field: key, "missing field '\(key)'") }

    /// Reads an object, calling `member` with each key; `member` reads the value.
    public mutating func object(_ member: (String, inout JSONReader) throws -> Void) throws {
        try enter(UInt8(ascii: "{"))
        skipSpace()
        if peek() == UInt8(ascii: "}") { i += 1; depth -= 1; return }
        while true {
            skipSpace()
            guard peek() == UInt8(ascii: "\"") else { throw fail("expected a member's name") }
            let key = try string()
            skipSpace()
            guard next() == UInt8(ascii: ":") else { throw fail("expected ':' after a member's name") }
            try member(key, &self)
            skipSpace()
            switch next() {
            case UInt8(ascii: ","): continue
            case UInt8(ascii: "}"): depth -= 1; return
            default: throw fail("expected ',' or '}' in an object")
            }
        }
    }

    /// Reads an array, calling `element` for each element; `element` reads it.
    public mutating func array(_ element: (inout JSONReader) throws -> Void) throws {
        try enter(UInt8(ascii: "["))
        skipSpace()
        if peek() == UInt8(ascii: "]") { i += 1; depth -= 1; return }
        while true {
            try element(&self)
            skipSpace()
            switch next() {
            case UInt8(ascii: ","): continue
            case UInt8(ascii: "]"): depth -= 1; return
            default: throw fail("expected ',' or ']' in an array")
            }
        }
    }

    /// An array of strings.
    public mutating func strings() throws -> [String] {
        var out: [String] = []
        try array { out.append(try $0.string()) }
        return out
    }

    /// True, and the `null` consumed, when the next value is `null`.
    public mutating func null() -> Bool {
        skipSpace()
        return literal("null")
    }

    public mutating func bool() throws -> Bool {
        skipSpace()
        if literal("true") { return true }
        if literal("false") { return false }
        throw fail("expected true or false")
    }

    /// A whole number within `Int64`: no fraction, no exponent.
    public mutating func int64() throws -> Int64 {
        let text = try numberText()
        if text.utf8.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }) {
            throw fail("expected a whole number, got \(text.prefix(40))")
        }
        guard let value = Int64(text) else { throw fail("a number outside \(Int64.min)...\(Int64.max)") }
        return value
    }

    public mutating func string() throws -> String {
        skipSpace()
        guard next() == UInt8(ascii: "\"") else { throw fail("expected a string") }
        let start = i
        // The common case: no escapes, one validation of the bytes as they are.
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                let text = bytes.withUnsafeBufferPointer { String(validating: UnsafeBufferPointer(rebasing: $0[start..<i]), as: UTF8.self) }
                guard let text else { throw fail("a string that is not UTF-8") }
                i += 1
                return text
            }
            if c == UInt8(ascii: "\\") { break }
            if c < 0x20 { throw fail("a control character in a string") }
            i += 1
        }
        var out = Array(bytes[start..<i])
        while i < bytes.count {
            let c = bytes[i]
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                guard let text = String(validating: out, as: UTF8.self) else { throw fail("a string that is not UTF-8") }
                return text
            case UInt8(ascii: "\\"):
                try unescape(into: &out)
            case 0..<0x20:
                throw fail("a control character in a string")
            default:
                out.append(c)
            }
        }
        throw fail("a string without its closing quote")
    }

    /// What the next value is, unread; nil when no value starts there.
    public enum Kind { case object, array, string, number, bool, null }
    public mutating func kind() -> Kind? {
        skipSpace()
        switch peek() {
        case UInt8(ascii: "{"): return .object
        case UInt8(ascii: "["): return .array
        case UInt8(ascii: "\""): return .string
        case UInt8(ascii: "t"), UInt8(ascii: "f"): return .bool
        case UInt8(ascii: "n"): return .null
        case .some(UInt8(ascii: "-")), .some(UInt8(ascii: "0")...UInt8(ascii: "9")): return .number
        default: return nil
        }
    }

    /// What the next value is, unread; a syntax error when no value starts there.
    public mutating func valueKind() throws -> Kind {
        guard let kind = kind() else { throw fail("expected a value") }
        return kind
    }

    /// A number's text as it stands (fraction and exponent included), checked against
    /// JSON's grammar.
    public mutating func numberText() throws -> String {
        skipSpace()
        let start = i
        func digits() -> Int {
            let from = i
            while let c = peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { i += 1 }
            return i - from
        }
        if peek() == UInt8(ascii: "-") { i += 1 }
        let intStart = i
        let whole = digits()
        if whole == 0 { throw fail("expected a number") }
        if whole > 1 && bytes[intStart] == UInt8(ascii: "0") { throw fail("a number with a leading zero") }
        if peek() == UInt8(ascii: ".") {
            i += 1
            guard digits() > 0 else { throw fail("a malformed number") }
        }
        if let c = peek(), c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
            i += 1
            if let c = peek(), c == UInt8(ascii: "+") || c == UInt8(ascii: "-") { i += 1 }
            guard digits() > 0 else { throw fail("a malformed number") }
        }
        return String(decoding: bytes[start..<i], as: UTF8.self)
    }

    /// Skips one value of any kind.
    public mutating func skip() throws {
        skipSpace()
        switch peek() {
        case UInt8(ascii: "{"): try object { _, r in try r.skip() }
        case UInt8(ascii: "["): try array { try $0.skip() }
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"), UInt8(ascii: "f"): _ = try bool()
        case UInt8(ascii: "n"): if !null() { throw fail("expected null") }
        case .some(UInt8(ascii: "-")), .some(UInt8(ascii: "0")...UInt8(ascii: "9")): _ = try numberText()
        default: throw fail("expected a value")
        }
    }

    // MARK: -

    private mutating func enter(_ open: UInt8) throws {
        skipSpace()
        guard next() == open else { throw fail("expected '\(Character(Unicode.Scalar(open)))'") }
        depth += 1
        if depth > Self.maxDepth { throw fail("nested deeper than \(Self.maxDepth)") }
    }

    private func peek() -> UInt8? { i < bytes.count ? bytes[i] : nil }

    private mutating func next() -> UInt8? {
        guard i < bytes.count else { return nil }
        defer { i += 1 }
        return bytes[i]
    }

    private mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0A || bytes[i] == 0x0D || bytes[i] == 0x09 { i += 1 }
    }

    private mutating func literal(_ word: StaticString) -> Bool {
        let n = word.utf8CodeUnitCount
        guard i + n <= bytes.count else { return false }
        let matches = word.withUTF8Buffer { w in (0..<n).allSatisfy { bytes[i + $0] == w[$0] } }
        if matches { i += n }
        return matches
    }

    /// One escape after its backslash, appended as UTF-8.
    private mutating func unescape(into out: inout [UInt8]) throws {
        guard let c = next() else { throw fail("a string without its closing quote") }
        switch c {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(c)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try hex4())
            if (0xD800..<0xDC00).contains(scalar) {
                guard next() == UInt8(ascii: "\\"), next() == UInt8(ascii: "u") else { throw fail("a lone surrogate in a string") }
                let low = UInt32(try hex4())
                guard (0xDC00..<0xE000).contains(low) else { throw fail("a lone surrogate in a string") }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let s = Unicode.Scalar(scalar) else { throw fail("a lone surrogate in a string") }
            out.append(contentsOf: UTF8.encode(s)!)
        default:
            throw fail("an unknown escape in a string")
        }
    }

    private mutating func hex4() throws -> UInt16 {
        var v: UInt16 = 0
        for _ in 0..<4 {
            guard let c = next() else { throw fail("a short \\u escape") }
            let d: UInt8
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = c - UInt8(ascii: "A") + 10
            default: throw fail("a bad \\u escape")
            }
            v = v << 4 | UInt16(d)
        }
        return v
    }
}

/// A value that reads itself from JSON; `WireJSON.decode` uses it instead of JSONDecoder.
public protocol JSONReadable {
    init(json: inout JSONReader) throws
}
