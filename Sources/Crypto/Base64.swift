/// Standard base64 (RFC 4648 with padding), for tus headers and S3 checksum headers.
public enum Base64 {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 3) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? alphabet[Int((b1 & 0x0f) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(b2 & 0x3f)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    public static func decode(_ string: String) -> [UInt8]? {
        var values: [UInt8] = []
        for c in string.utf8 {
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(c - 65)
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(c - 97 + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(c - 48 + 52)
            case UInt8(ascii: "+"), UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "/"), UInt8(ascii: "_"): values.append(63)
            case UInt8(ascii: "="): continue
            default: return nil
            }
        }
        if values.count % 4 == 1 { return nil }
        var out: [UInt8] = []
        var i = 0
        while i + 1 < values.count {
            let v0 = values[i], v1 = values[i + 1]
            out.append(v0 << 2 | v1 >> 4)
            if i + 2 < values.count { out.append((v1 & 0x0f) << 4 | values[i + 2] >> 2) }
            if i + 3 < values.count { out.append((values[i + 2] & 3) << 6 | values[i + 3]) }
            i += 4
        }
        return out
    }
}
