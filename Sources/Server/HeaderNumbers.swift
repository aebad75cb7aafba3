import Protocol

/// Byte counts and offsets in request headers (`Content-Length`, `Upload-Offset`): one
/// check for all of them, so no handler parses a client's number on its own. A value
/// that is not `1*DIGIT` is a 400 naming the header; one past `Int64.max` is `tooLarge`'s
/// status (413 for a body length, 400 otherwise), never a trap.
extension HTTPRequest {
    /// Header `name` as a number from 0 to `Int64.max`, nil when absent. `meaning` says
    /// what the header must be, for the error message (e.g. "the upload's offset in bytes;
    /// HEAD the upload to learn it").
    func byteCount(_ name: String, meaning: String, tooLarge: Int = 400) throws(RequestFailure) -> Int64? {
        guard let text = header(name) else { return nil }
        switch DecimalNumber(parsing: text) {
        case .value(let n):
            return n
        case .tooLarge:
            throw RequestFailure(tooLarge, tooLarge == 413 ? "body_too_large" : "bad_request",
                                 "\(name) '\(Self.excerpt(text))' is larger than any this server takes (at most \(Int64.max)); it must be \(meaning)",
                                 field: name)
        case .malformed:
            throw RequestFailure(400, "bad_request", "\(name) '\(Self.excerpt(text))' is not a number of bytes (decimal digits only); it must be \(meaning)", field: name)
        }
    }

    /// A client's value quoted in a message, at most 64 characters of it (a header may
    /// be 100 KiB; the reply need not repeat it).
    static func excerpt(_ text: String) -> String {
        text.count <= 64 ? text : text.prefix(61) + "..."
    }
}
