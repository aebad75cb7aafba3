import Crypto

/// Header names and formats of the tus 1.0 subset we speak.
public enum Tus {
    public static let resumable = "Tus-Resumable"
    public static let uploadOffset = "Upload-Offset"
    public static let uploadLength = "Upload-Length"
    public static let uploadExpires = "Upload-Expires"
    public static let uploadChecksum = "Upload-Checksum"
    public static let uploadMetadata = "Upload-Metadata"
    public static let offsetContentType = "application/offset+octet-stream"
    /// Status for a chunk whose Upload-Checksum does not match (tus checksum extension).
    public static let checksumMismatchStatus = 460

    /// `Upload-Checksum: sha256 <base64 of the 32-byte digest>`.
    public static func checksumHeader(_ digest: [UInt8]) -> String { "sha256 " + Base64.encode(digest) }

    /// Parses `Upload-Metadata: key base64,key2 base64` into its pairs, in order.
    public static func parseMetadataPairs(_ header: String) -> [(key: String, value: [UInt8])]? {
        var out: [(key: String, value: [UInt8])] = []
        for pair in header.split(separator: ",") {
            let parts = pair.trimmingSpaces.split(separator: " ", maxSplits: 1)
            guard let key = parts.first, !key.isEmpty else { return nil }
            if parts.count == 2 {
                guard let value = Base64.decode(String(parts[1])) else { return nil }
                out.append((String(key), value))
            } else {
                out.append((String(key), []))
            }
        }
        return out
    }

    /// Parses `Upload-Metadata: key base64,key2 base64` into a dictionary (a repeated key: the last).
    public static func parseMetadata(_ header: String) -> [String: [UInt8]]? {
        parseMetadataPairs(header).map { Dictionary($0.map { ($0.key, $0.value) }, uniquingKeysWith: { _, last in last }) }
    }
}

extension Substring {
    /// Without leading and trailing spaces (header list items).
    public var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}

/// HTTP dates (RFC 7231 IMF-fixdate) for Upload-Expires.
public enum HTTPDate {
    private static let days = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    public static func format(_ unix: Int64) -> String {
        let dayCount = unix >= 0 ? unix / 86400 : (unix - 86399) / 86400
        let secs = unix - dayCount * 86400
        // Civil-from-days (Howard Hinnant).
        let z = dayCount + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        let y = yoe + era * 400 + (m <= 2 ? 1 : 0)
        let weekday = days[Int(((dayCount % 7) + 7) % 7)]
        func two(_ v: Int64) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(weekday), \(two(d)) \(months[Int(m - 1)]) \(y) \(two(secs / 3600)):\(two(secs / 60 % 60)):\(two(secs % 60)) GMT"
    }
}
