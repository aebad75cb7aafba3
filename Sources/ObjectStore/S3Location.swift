#if canImport(Glibc)
import Glibc
#endif

/// Where a bucket is: `s3://BUCKET?endpoint=http://HOST:PORT&region=REGION[&credentials=FILE]`.
/// Requests use path style (`ENDPOINT/BUCKET/KEY`), which every S3-compatible store
/// answers (SeaweedFS, MinIO, Ceph, AWS itself).
public struct S3Location: Sendable, Equatable {
    public var bucket: String
    /// `http://host:port` or `https://host[:port]`, no trailing slash.
    public var endpoint: String
    public var region: String
    /// A credentials file (`key = value` lines, AWS's own format is accepted) instead of the environment.
    public var credentialsFile: String?

    public init(bucket: String, endpoint: String, region: String = "us-east-1", credentialsFile: String? = nil) {
        self.bucket = bucket; self.endpoint = endpoint; self.region = region; self.credentialsFile = credentialsFile
    }

    /// `host[:port]` of the endpoint, as the `Host` header (and so the signature) carries it.
    public var host: String {
        var rest = Substring(endpoint)
        if let scheme = rest.firstRange(of: "://") { rest = rest[scheme.upperBound...] }
        return String(rest.prefix { $0 != "/" })
    }

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Parses the `--store` value. Errors name the part at fault and the form expected.
    public static func parse(_ text: String) throws(ParseError) -> S3Location {
        let form = "s3://BUCKET?endpoint=http://HOST:PORT&region=REGION[&credentials=FILE]"
        guard text.hasPrefix("s3://") else { throw ParseError(description: "store '\(text)' is not an s3:// URL; use \(form)") }
        let rest = text.dropFirst("s3://".count)
        let bucketPart = rest.prefix { $0 != "?" && $0 != "/" }
        let bucket = String(bucketPart)
        guard bucket.count >= 3, bucket.count <= 63,
              bucket.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7a) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2d || $0 == 0x2e }) else {
            throw ParseError(description: "store '\(text)': bucket '\(bucket)' must be 3 to 63 lowercase letters, digits, '-' or '.'")
        }
        var location = S3Location(bucket: bucket, endpoint: "")
        if let q = rest.firstIndex(of: "?") {
            for pair in rest[rest.index(after: q)...].split(separator: "&") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                let key = String(kv[0]), value = kv.count > 1 ? percentDecoded(String(kv[1])) : ""
                switch key {
                case "endpoint": location.endpoint = value
                case "region": location.region = value
                case "credentials": location.credentialsFile = value
                default: throw ParseError(description: "store '\(text)': unknown argument '\(key)'; use \(form)")
                }
            }
        }
        while location.endpoint.hasSuffix("/") { location.endpoint.removeLast() }
        guard location.endpoint.hasPrefix("http://") || location.endpoint.hasPrefix("https://"), !location.host.isEmpty else {
            throw ParseError(description: "store '\(text)' needs endpoint=http(s)://HOST:PORT (the S3 API's address); use \(form)")
        }
        guard !location.region.isEmpty else { throw ParseError(description: "store '\(text)': region is empty; use \(form)") }
        return location
    }

    /// The credentials: from `credentialsFile` when given, else `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` from `environment`.
    public func credentials(environment: [String: String]) throws(ParseError) -> S3Credentials {
        if let path = credentialsFile {
            guard let text = Self.readFile(path) else {
                throw ParseError(description: "cannot read the credentials file \(path): \(String(cString: strerror(errno))); it holds aws_access_key_id = … and aws_secret_access_key = … lines")
            }
            var values: [String: String] = [:]
            for line in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
                let kv = line.split(separator: "=", maxSplits: 1)
                guard kv.count == 2 else { continue }
                values[kv[0].trimmingCharacters(in: " \t").lowercased()] = kv[1].trimmingCharacters(in: " \t")
            }
            guard let access = values["aws_access_key_id"], let secret = values["aws_secret_access_key"], !access.isEmpty, !secret.isEmpty else {
                throw ParseError(description: "the credentials file \(path) lacks aws_access_key_id = … or aws_secret_access_key = …")
            }
            return S3Credentials(accessKey: access, secretKey: secret)
        }
        guard let access = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"], !access.isEmpty, !secret.isEmpty else {
            throw ParseError(description: "the S3 store needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add credentials=FILE to the store URL")
        }
        return S3Credentials(accessKey: access, secretKey: secret)
    }

    private static func readFile(_ path: String) -> String? {
        guard let f = fopen(path, "r") else { return nil }
        defer { fclose(f) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buffer, 1, buffer.count, f)
            if n <= 0 { break }
            out += buffer[0..<n]
            if out.count > 1 << 20 { return nil }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func percentDecoded(_ s: String) -> String {
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "%"), bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                bytes = bytes.dropFirst(2)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var s = self
        while let f = s.first, set.contains(f) { s.removeFirst() }
        while let l = s.last, set.contains(l) { s.removeLast() }
        return String(s)
    }
}
