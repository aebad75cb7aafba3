import Protocol

/// How a request's body is delimited: `Content-Length` or `Transfer-Encoding: chunked`,
/// checked once, by the router, before any handler reads a header. libmicrohttpd reads
/// the body by the first `Content-Length` it finds (or by chunks when chunked is named);
/// the handlers must never see another length than the one the body is read by, and
/// never a length they cannot add to an offset. Refused (RFC 9112, section 6.3):
/// - `Content-Length` that is not decimal digits (400), or past `Int64.max` (413);
/// - `Content-Length` sent twice with different values (400);
/// - `Content-Length` together with `Transfer-Encoding` (400: one or the other);
/// - a `Transfer-Encoding` other than `chunked`, or it sent twice differently (400).
extension HTTPRequest {
    /// The declared body length. Only meaningful after `framingRefusal()` found nothing
    /// wrong (the router checks that first): nil when the header is absent.
    var contentLength: Int64? { header("Content-Length").flatMap { DecimalNumber(parsing: $0).int64 } }

    /// True unless the request certainly has no body (no Transfer-Encoding, and a
    /// Content-Length of exactly 0 or none). A malformed length counts as a body: a
    /// reply decided at the headers then closes the connection instead of reading on.
    var expectsBody: Bool {
        // Two lengths: libmicrohttpd reads by the first, `headers` holds the last.
        if header("Transfer-Encoding") != nil || conflicting.contains("content-length") { return true }
        guard let text = header("Content-Length") else { return false }
        return DecimalNumber(parsing: text) != .value(0)
    }

    /// The refusal of a request whose body's length is not clear, nil when it is.
    func framingRefusal() -> HTTPResponse? {
        let lengthField = "Content-Length", codingField = "Transfer-Encoding"
        if conflicting.contains(lengthField.lowercased()) {
            return .error(400, "bad_request", "Content-Length is sent more than once with different values; send it once", field: lengthField)
        }
        if conflicting.contains(codingField.lowercased()) {
            return .error(400, "bad_request", "Transfer-Encoding is sent more than once with different values; send 'Transfer-Encoding: chunked' once", field: codingField)
        }
        if let coding = header(codingField) {
            if header(lengthField) != nil {
                return .error(400, "bad_request", "a request has Content-Length or 'Transfer-Encoding: chunked', not both; send one", field: codingField)
            }
            if coding.lowercased() != "chunked" {
                return .error(400, "bad_request", "Transfer-Encoding '\(Self.excerpt(coding))' is not understood here; send 'chunked' or a Content-Length", field: codingField)
            }
        }
        do {
            _ = try byteCount(lengthField, meaning: "the body's length in bytes", tooLarge: 413)
        } catch {
            return error.response
        }
        return nil
    }
}
