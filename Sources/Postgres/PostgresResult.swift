import CPostgres

/// The rows of one statement, in libpq's text format (`t`/`f` for booleans, `\x…` hex
/// for bytea). Freed when released.
/// `@unchecked Sendable`: immutable after creation; libpq's result is read-only.
public final class PostgresResult: @unchecked Sendable {
    let handle: OpaquePointer

    init(_ handle: OpaquePointer) { self.handle = handle }
    deinit { PQclear(handle) }

    public var rowCount: Int { Int(PQntuples(handle)) }
    public var columnCount: Int { Int(PQnfields(handle)) }

    /// Rows changed by an INSERT, UPDATE or DELETE (0 for other statements).
    public var affectedRows: Int {
        guard let text = PQcmdTuples(handle) else { return 0 }
        return Int(String(cString: text)) ?? 0
    }

    public func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(handle, Int32(row), Int32(column)) != 0 }

    /// The value as text, nil when NULL.
    public func text(_ row: Int, _ column: Int) -> String? {
        if isNull(row, column) { return nil }
        guard let p = PQgetvalue(handle, Int32(row), Int32(column)) else { return nil }
        let n = Int(PQgetlength(handle, Int32(row), Int32(column)))
        return p.withMemoryRebound(to: UInt8.self, capacity: n) { String(decoding: UnsafeBufferPointer(start: $0, count: n), as: UTF8.self) }
    }

    /// A bytea value (text format `\x` followed by hex digits), nil when NULL.
    public func bytes(_ row: Int, _ column: Int) -> [UInt8]? {
        guard let text = text(row, column) else { return nil }
        let digits = Array(text.utf8.dropFirst(2))
        guard text.hasPrefix("\\x"), digits.count % 2 == 0 else { return Array(text.utf8) }
        func nibble(_ c: UInt8) -> UInt8 { c <= 57 ? c - 48 : (c | 0x20) - 87 }
        var out = [UInt8](repeating: 0, count: digits.count / 2)
        for i in out.indices { out[i] = nibble(digits[2 * i]) << 4 | nibble(digits[2 * i + 1]) }
        return out
    }
}
