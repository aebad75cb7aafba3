import Protocol

/// Integer query arguments with the bounds the OpenAPI document declares for them
/// (`minimum`, `maximum`): a value outside them is a 400 naming the argument, never
/// silently clamped, so the document and the server say the same thing. Read with
/// `DecimalNumber`: a number past `Int64.max` is refused like any other out of bounds.
extension HTTPRequest {
    func integer(_ name: String, default value: Int64, in range: ClosedRange<Int64>) throws(RequestFailure) -> Int64 {
        guard let text = query[name] else { return value }
        // The bounds here are never negative: a sign is as wrong as any other non-digit.
        guard let number = DecimalNumber(parsing: text).int64, range.contains(number) else {
            let bounds = range.upperBound == .max ? "an integer from \(range.lowerBound) to \(Int64.max)" : "an integer from \(range.lowerBound) to \(range.upperBound)"
            throw RequestFailure(400, "bad_request", "'\(name)' must be \(bounds), got '\(Self.excerpt(text))'", field: name)
        }
        return number
    }
}
