#if canImport(Glibc)
import Glibc
#endif

/// When a photo was taken: EXIF DateTimeOriginal when the file has one, else its mtime.
public struct CaptureDate: Sendable, Equatable {
    public enum Source: String, Sendable { case exif, mtime }
    /// "YYYY-MM-DDTHH:MM:SS": camera local time for EXIF (EXIF carries no zone unless
    /// OffsetTimeOriginal is set, which few cameras write), UTC with a "Z" for mtime.
    public var value: String
    public var source: Source

    public init(value: String, source: Source) { self.value = value; self.source = source }

    /// How many leading bytes of a file the parsers look at. EXIF lives in the first
    /// APP1 segment of a JPEG (at most 64 KiB) and in a HEIF item near the start.
    public static let prefixLength = 128 * 1024

    /// The capture date from a file's first bytes, else from its mtime.
    public static func from(prefix: UnsafeRawBufferPointer, mtime: Int64) -> CaptureDate {
        if let exif = ExifReader.dateTimeOriginal(fileStart: prefix) {
            return CaptureDate(value: exif, source: .exif)
        }
        return CaptureDate(value: utcString(mtime), source: .mtime)
    }

    static func utcString(_ seconds: Int64) -> String {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }
}
