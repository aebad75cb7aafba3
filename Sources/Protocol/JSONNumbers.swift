/// Numbers in a JSON body that no field of this protocol can hold. Every number in a
/// request body here is an `Int64` (sizes, times, sequences); Foundation's decoder
/// refuses one that is not a whole number in that range (2^64, 1.5, 1e400) while
/// parsing, before any field is decoded, with a bare "not valid JSON" and no field. So
/// when a body fails that way, this scan finds the number and the key it belongs to,
/// for a reply that says what was wrong. It runs only on that error path.
extension WireJSON {
    /// The first number in `bytes` (a JSON text) that is not a whole number an `Int64`
    /// holds, with the object key it is the value of (or the array it is in); nil when
    /// every number fits.
    static func unfitNumber(in bytes: [UInt8]) -> (key: String?, text: String)? {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\"), colon = UInt8(ascii: ":"), minus = UInt8(ascii: "-")
        var key: String?
        var lastString: String?
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == quote {
                var j = i + 1
                while j < bytes.count && bytes[j] != quote { j += bytes[j] == backslash ? 2 : 1 }
                lastString = String(decoding: bytes[(i + 1)..<min(j, bytes.count)], as: UTF8.self)
                i = j + 1
            } else if c == colon {
                key = lastString
                i += 1
            } else if c == minus || isDigit(c) {
                var j = i + 1
                while j < bytes.count, isNumberPart(bytes[j]) { j += 1 }
                let token = String(decoding: bytes[i..<j], as: UTF8.self)
                if !fitsInt64(token) { return (key, token) }
                i = j
            } else {
                i += 1
            }
        }
        return nil
    }

    /// True for `-?[0-9]+` within Int64, or another JSON number form (`1e3`, `2.0`) whose
    /// value is a whole number within it (Foundation's decoder takes those).
    static func fitsInt64(_ token: String) -> Bool {
        let digits = token.hasPrefix("-") ? token.dropFirst() : Substring(token)
        if !digits.isEmpty && digits.utf8.allSatisfy(isDigit) { return Int64(token) != nil }
        guard let value = Double(token), value.isFinite, value == value.rounded() else { return false }
        return value >= -9.223372036854775808e18 && value < 9.223372036854775808e18
    }

    private static func isDigit(_ c: UInt8) -> Bool { c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9") }

    private static func isNumberPart(_ c: UInt8) -> Bool {
        isDigit(c) || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") || c == UInt8(ascii: "+") || c == UInt8(ascii: "-")
    }
}
