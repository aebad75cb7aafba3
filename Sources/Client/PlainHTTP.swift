/// A device token sent over plain HTTP can be read by anyone on the path, and with it
/// every photo of the workspace. This machine's own loopback is no path: a server on
/// 127.0.0.1 (./mount's local server) stays usable without TLS.
public enum PlainHTTP {
    /// Why a token must not be sent to `baseURL`, or nil: https, or http to a loopback address.
    public static func refusal(baseURL: String) -> String? {
        guard let colon = baseURL.range(of: "://"), baseURL[..<colon.lowerBound].lowercased() == "http" else { return nil }
        let host = Self.host(String(baseURL[colon.upperBound...]))
        if isLoopback(host) { return nil }
        return "refusing to send this device's token in clear text to \(baseURL): plain HTTP to another machine "
            + "exposes the token and the photos; use an https:// server URL (vdrive serve --tls-cert, or a TLS proxy), "
            + "or allow it knowingly with --allow-insecure-http (or \"allowInsecureHTTP\": true in remote.json)"
    }

    /// The host of `authority/path…`, without user info, port or IPv6 brackets, lowercased.
    static func host(_ rest: String) -> String {
        var authority = Substring(rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" })
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            return String(authority[authority.index(after: authority.startIndex)..<close]).lowercased()
        }
        if let colon = authority.firstIndex(of: ":") { authority = authority[..<colon] }
        return authority.lowercased()
    }

    /// 127.0.0.0/8, ::1, localhost (and names under .localhost, which resolve to loopback: RFC 6761).
    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}
