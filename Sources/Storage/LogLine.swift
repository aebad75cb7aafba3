#if canImport(Glibc)
import Glibc
#endif

/// One line of the log, on stderr, in one write (lines of several threads never mix).
/// Into a file (the background mount's `vdrive.log`, or `2>file`) each line starts with
/// its time in UTC, to the millisecond: a log read after a failure must say when each
/// thing happened. To a terminal or the journal (which stamps its own lines) as is.
public enum LogLine {
    /// Whether stderr is a regular file, asked once.
    private static let stamped: Bool = {
        var st = stat()
        return fstat(2, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
    }()

    public static func write(_ line: String) {
        let text = (stamped ? timestamp() + " " : "") + line + "\n"
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            offset += n
        }
    }

    /// `2026-12-03T21:20:05.123Z`.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S", &parts)
        let millis = Int(now.tv_nsec / 1_000_000)
        let head = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return head + "." + String(repeating: "0", count: millis < 10 ? 2 : millis < 100 ? 1 : 0) + String(millis) + "Z"
    }
}
