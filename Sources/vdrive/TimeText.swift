import Foundation

/// Times on the command line: shown in local time, given as a date, a date and time, a
/// duration before now, or Unix seconds.
enum TimeText {
    /// "2026-01-02 10:03:12" in local time.
    static func show(_ seconds: Int64) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return f.string(from: Date(timeIntervalSince1970: Double(seconds)))
    }

    /// Unix seconds of `text`: `2026-01-02`, `2026-01-02 10:03`, `2026-01-02T10:03:12`
    /// (local time), `30m`, `2h`, `3d` (that long before `now`), or `@1767348192`.
    /// nil when it is none of these.
    static func parse(_ text: String, now: Int64 = Int64(Date().timeIntervalSince1970)) -> Int64? {
        if text.hasPrefix("@") {
            guard let n = Int64(text.dropFirst()), n >= 0, n < 1 << 40 else { return nil }
            return n
        }
        if let unit = text.last, let n = Int64(text.dropLast()), n >= 0, n < 1 << 30 {
            let scale: Int64? = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800][String(unit)]
            if let scale { return max(0, now - n * scale) }
        }
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        for format in ["yyyy-MM-dd", "yyyy-MM-dd HH:mm", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd'T'HH:mm", "yyyy-MM-dd'T'HH:mm:ss"] {
            f.dateFormat = format
            if let d = f.date(from: text) { return Int64(d.timeIntervalSince1970) }
        }
        return nil
    }
}
