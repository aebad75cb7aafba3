/// ObjectStore: an S3-compatible object store for the server's blocks: the server's own
/// calls (put, get, head, delete, list) signed with AWS Signature Version 4, and
/// presigned URLs (query authentication) that let a device PUT or GET one object
/// without the server's credentials.
///
/// Terms: a *key* is an object's name in the bucket (`blocks/<sha256>`); a *presigned
/// URL* carries its signature in `X-Amz-*` query arguments and names the headers the
/// request must carry (`X-Amz-SignedHeaders`), so the store itself refuses a request
/// whose method, key, expiry or signed headers differ.
/// Thread safety: `SigV4` is pure functions; `S3Store` may be called from many threads.
/// Imports: HTTPClient (libcurl through it), Crypto (SHA-256, HMAC-SHA256).
import Crypto
#if canImport(Glibc)
import Glibc
#endif

/// An access key pair for the store.
public struct S3Credentials: Sendable, Equatable {
    public var accessKey: String
    public var secretKey: String
    public init(accessKey: String, secretKey: String) { self.accessKey = accessKey; self.secretKey = secretKey }
}

/// AWS Signature Version 4 (the algorithm `AWS4-HMAC-SHA256`), as S3 documents it:
/// a canonical request, a string to sign over its SHA-256, and an HMAC chain from the
/// secret key through the date, region and service. Pure: the time is an argument.
public enum SigV4 {
    public static let algorithm = "AWS4-HMAC-SHA256"
    /// The payload hash of a presigned request, and of a server call that does not sign its body.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"
    /// The longest a presigned URL may live (S3 refuses more): 7 days.
    public static let maxExpiry: Int64 = 7 * 86400

    /// The key of one day, region and service: HMAC chain from "AWS4" + secret.
    public static func signingKey(secret: String, day: String, region: String, service: String) -> [UInt8] {
        var key = HMACSHA256.mac(key: Array(("AWS4" + secret).utf8), message: Array(day.utf8))
        key = HMACSHA256.mac(key: key, message: Array(region.utf8))
        key = HMACSHA256.mac(key: key, message: Array(service.utf8))
        return HMACSHA256.mac(key: key, message: Array("aws4_request".utf8))
    }

    /// One request to sign. `path` is the decoded object path (`/bucket/key`), `query`
    /// the decoded query arguments, `headers` those to sign (names any case; `host` among them).
    public struct Request: Sendable {
        public var method: String
        public var path: String
        public var query: [(String, String)]
        public var headers: [(String, String)]
        public var payloadHash: String
        public init(method: String, path: String, query: [(String, String)] = [], headers: [(String, String)], payloadHash: String) {
            self.method = method; self.path = path; self.query = query; self.headers = headers; self.payloadHash = payloadHash
        }

        /// Signed header names: lowercase, sorted, joined by `;`.
        public var signedHeaders: String {
            headers.map { $0.0.lowercased() }.sorted().joined(separator: ";")
        }

        /// The canonical request of SigV4: method, URI-encoded path (slashes kept),
        /// sorted encoded query, sorted `name:value` header lines, signed headers, payload hash.
        public var canonical: String {
            let pairs: [(String, String)] = query.map { (SigV4.encode($0.0, keepSlash: false), SigV4.encode($0.1, keepSlash: false)) }
            let sortedPairs = pairs.sorted { (a: (String, String), b: (String, String)) -> Bool in a.0 == b.0 ? a.1 < b.1 : a.0 < b.0 }
            let encodedQuery = sortedPairs.map { (p: (String, String)) -> String in p.0 + "=" + p.1 }.joined(separator: "&")
            let lines: [(String, String)] = headers.map { ($0.0.lowercased(), SigV4.trimmed($0.1)) }
            let sortedLines = lines.sorted { (a: (String, String), b: (String, String)) -> Bool in a.0 < b.0 }
            let headerLines = sortedLines.map { (p: (String, String)) -> String in p.0 + ":" + p.1 + "\n" }.joined()
            return [method, SigV4.encode(path, keepSlash: true), encodedQuery, headerLines, signedHeaders, payloadHash].joined(separator: "\n")
        }
    }

    /// The scope `day/region/service/aws4_request`.
    public static func scope(day: String, region: String, service: String) -> String {
        "\(day)/\(region)/\(service)/aws4_request"
    }

    /// The string to sign for `request` at `amzDate` (`YYYYMMDDTHHMMSSZ`).
    public static func stringToSign(_ request: Request, amzDate: String, scope: String) -> String {
        [algorithm, amzDate, scope, SHA256Hasher.digest(request.canonical).hex].joined(separator: "\n")
    }

    /// The hex signature of `request`.
    public static func signature(_ request: Request, amzDate: String, region: String, service: String, secret: String) -> String {
        let day = String(amzDate.prefix(8))
        let key = signingKey(secret: secret, day: day, region: region, service: service)
        let toSign = stringToSign(request, amzDate: amzDate, scope: scope(day: day, region: region, service: service))
        return Hex.encode(HMACSHA256.mac(key: key, message: Array(toSign.utf8)))
    }

    /// The `Authorization` header value of a header-signed request. `request.headers`
    /// must already hold `x-amz-date` and `x-amz-content-sha256` (S3 wants both).
    public static func authorization(_ request: Request, amzDate: String, region: String, service: String = "s3",
                                     credentials: S3Credentials) -> String {
        let day = String(amzDate.prefix(8))
        let sig = signature(request, amzDate: amzDate, region: region, service: service, secret: credentials.secretKey)
        return "\(algorithm) Credential=\(credentials.accessKey)/\(scope(day: day, region: region, service: service)), SignedHeaders=\(request.signedHeaders), Signature=\(sig)"
    }

    /// The query arguments of a presigned request (query authentication): the `X-Amz-*`
    /// arguments, signature last. `request.query` may hold others (they are signed too);
    /// `request.headers` are the headers the user of the URL must send (`host` at least).
    public static func presignQuery(_ request: Request, amzDate: String, expires: Int64, region: String, service: String = "s3",
                                    credentials: S3Credentials) -> [(String, String)] {
        let day = String(amzDate.prefix(8))
        var signed = request
        signed.payloadHash = unsignedPayload
        signed.query += [("X-Amz-Algorithm", algorithm),
                         ("X-Amz-Credential", "\(credentials.accessKey)/\(scope(day: day, region: region, service: service))"),
                         ("X-Amz-Date", amzDate), ("X-Amz-Expires", String(expires)),
                         ("X-Amz-SignedHeaders", signed.signedHeaders)]
        let sig = signature(signed, amzDate: amzDate, region: region, service: service, secret: credentials.secretKey)
        return signed.query + [("X-Amz-Signature", sig)]
    }

    /// `query` as a URL's query string (each part URI-encoded as SigV4 encodes it).
    public static func queryString(_ query: [(String, String)]) -> String {
        query.map { encode($0.0, keepSlash: false) + "=" + encode($0.1, keepSlash: false) }.joined(separator: "&")
    }

    /// SigV4's URI encoding: every byte but `A-Za-z0-9-._~` as `%XY` (uppercase); `/` kept in paths.
    public static func encode(_ s: String, keepSlash: Bool) -> String {
        var out = ""
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += "%" + Hex.encode([b]).uppercased()
            }
        }
        return out
    }

    /// A header value as SigV4 canonicalises it: outer spaces trimmed, inner runs made one space.
    static func trimmed(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// `YYYYMMDDTHHMMSSZ` of Unix time `t` (UTC).
    public static func amzDate(_ t: Int64) -> String {
        var seconds = time_t(t)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ v: Int32) -> String { v < 10 ? "0\(v)" : "\(v)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }
}
