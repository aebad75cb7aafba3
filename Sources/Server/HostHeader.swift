import Crypto

/// The `Host` a request names, when the server builds an absolute URL from it (the
/// presigned upload URLs, without `--public-url`). It is the client's text: checked to
/// be a host name or address with an optional port before it is copied into every URL
/// of a reply. Unchecked, a Host of 200 KiB was copied into each of a plan's URLs (up to
/// 262,144 of them in one reply: gigabytes of memory for one request).
extension HTTPRequest {
    /// `host[:port]` as sent, nil without a Host header (HTTP/1.0); a 400 naming `Host`
    /// when it is not a host name, an IPv4 address or a bracketed IPv6 address, with a
    /// port of at most 5 digits, 261 characters in all.
    func urlHost() throws(RequestFailure) -> String? {
        guard let host = header("Host") else { return nil }
        guard Self.isHost(host) else {
            throw RequestFailure(400, "bad_request", "Host '\(Self.excerpt(host))' is not a host name or address with an optional port; send the server's address (the server can also be given --public-url)",
                                 field: "Host")
        }
        return host
    }

    static func isHost(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 261 else { return false }
        var name = bytes[...]
        // An optional :port after the name (after the closing bracket of an IPv6 address,
        // whose own colons are not a port).
        if let colon = bytes.lastIndex(of: UInt8(ascii: ":")) {
            let insideBrackets = bytes.first == UInt8(ascii: "[") && (colon == 0 || bytes[colon - 1] != UInt8(ascii: "]"))
            if !insideBrackets {
                let port = bytes[(colon + 1)...]
                guard (1...5).contains(port.count), port.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return false }
                name = bytes[..<colon]
            }
        }
        if name.first == UInt8(ascii: "[") {
            guard name.count >= 4, name.last == UInt8(ascii: "]") else { return false }
            return name.dropFirst().dropLast().allSatisfy { Hex.isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") }
        }
        guard !name.isEmpty, name.count <= 253 else { return false }
        return name.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }
    }
}
