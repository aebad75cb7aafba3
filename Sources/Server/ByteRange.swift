/// One `bytes=` range (multiple ranges are answered with the whole body, as RFC 9110 allows).
enum ByteRange: Equatable {
    case none
    case unsatisfiable
    case range(Int64, Int64)

    static func parse(_ header: String, size: Int64) -> ByteRange {
        guard header.hasPrefix("bytes="), !header.contains(",") else { return .none }
        let spec = header.dropFirst(6)
        guard let dash = spec.firstIndex(of: "-") else { return .none }
        let first = spec[..<dash], last = spec[spec.index(after: dash)...]
        if first.isEmpty {
            guard let n = Int64(last), n > 0 else { return .unsatisfiable }
            if size == 0 { return .unsatisfiable }
            return .range(max(0, size - n), size - 1)
        }
        guard let start = Int64(first), start >= 0 else { return .none }
        if start >= size { return .unsatisfiable }
        if last.isEmpty { return .range(start, size - 1) }
        guard let end = Int64(last), end >= start else { return .none }
        return .range(start, min(end, size - 1))
    }
}
