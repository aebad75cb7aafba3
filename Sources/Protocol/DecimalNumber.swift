/// A non-negative decimal number as a client writes it in a header, a query argument or
/// a presigned URL: HTTP's `1*DIGIT` (RFC 9110), read into an `Int64` without ever
/// trapping. Swift traps on overflow, and a trap in the server is a remote crash (one
/// PATCH declaring `Content-Length: 9223372036854775807` did it), so a number from the
/// network is parsed here, where "too large" is an answer rather than a crash, and
/// compared with known bounds before any arithmetic.
///
/// Stricter than `Int64(_:)`, which also takes a sign (`+5`, `-0`): a byte count, an
/// offset or a position has none on the wire.
public enum DecimalNumber: Equatable, Sendable {
    /// 0 … `Int64.max`.
    case value(Int64)
    /// Only digits, but more than `Int64.max` (9223372036854775807).
    case tooLarge
    /// Empty, or a character other than an ASCII digit (a sign, a space, a dot, `0x`).
    case malformed

    public init<S: StringProtocol>(parsing text: S) {
        var value: Int64 = 0
        var overflow = false
        var digits = 0
        for c in text.utf8 {
            guard c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") else {
                self = .malformed
                return
            }
            digits += 1
            if overflow { continue }
            let (shifted, o1) = value.multipliedReportingOverflow(by: 10)
            let (sum, o2) = shifted.addingReportingOverflow(Int64(c - UInt8(ascii: "0")))
            if o1 || o2 { overflow = true } else { value = sum }
        }
        if digits == 0 { self = .malformed } else if overflow { self = .tooLarge } else { self = .value(value) }
    }

    /// The number, nil when it is too large or malformed.
    public var int64: Int64? {
        if case .value(let v) = self { return v }
        return nil
    }
}
