/// Integer query arguments with the bounds the OpenAPI document declares for them
/// (`minimum`, `maximum`): a value outside them is a 400 naming the argument, never
/// silently clamped, so the document and the server say the same thing.
extension HTTPRequest {
    func integer(_ name: String, default value: Int64, in range: ClosedRange<Int64>) throws(RequestFailure) -> Int64 {
        guard let text = query[name] else { return value }
        guard let number = Int64(text), range.contains(number) else {
            let bounds = range.upperBound == .max ? "an integer ≥ \(range.lowerBound)" : "an integer from \(range.lowerBound) to \(range.upperBound)"
            throw RequestFailure(400, "bad_request", "'\(name)' must be \(bounds), got '\(text)'", field: name)
        }
        return number
    }
}
