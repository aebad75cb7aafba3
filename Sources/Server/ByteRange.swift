import Protocol

/// One `bytes=` range (multiple ranges are answered with the whole body, as RFC 9110 allows).
/// Positions are read with `DecimalNumber`, so a position past `Int64.max` is a position
/// past the end, not a trap or a parse failure: a first position there is unsatisfiable,
/// a last position there means "to the end", a suffix that long means the whole body.
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
            // The last n bytes (n > 0); more than the body has is the whole body.
            let n: Int64
            switch DecimalNumber(parsing: last) {
            case .value(let v) where v > 0: n = min(v, size)
            case .tooLarge: n = size
            default: return .unsatisfiable
            }
            if size == 0 { return .unsatisfiable }
            return .range(size - n, size - 1)
        }
        let start: Int64
        switch DecimalNumber(parsing: first) {
        case .value(let v): start = v
        case .tooLarge: return .unsatisfiable
        case .malformed: return .none
        }
        if start >= size { return .unsatisfiable }
        if last.isEmpty { return .range(start, size - 1) }
        switch DecimalNumber(parsing: last) {
        case .value(let end) where end >= start: return .range(start, min(end, size - 1))
        case .tooLarge: return .range(start, size - 1)
        default: return .none
        }
    }
}
