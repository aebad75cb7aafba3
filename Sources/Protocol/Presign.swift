import Crypto

/// Presigned upload URLs: `/v1/tus/<id>?hash=<hex>&size=<n>&expires=<unix>&device=<d>&sig=<hex>`.
///
/// `sig` is HMAC-SHA256, under the server's secret key, over the canonical string
///
///     vdrive-presign-v1 \n <METHOD> \n <path> \n <hash> \n <size> \n <expires> [\n <device>]
///
/// `device` names the device the URL was handed to (`<id>.<16 hex digits>`: its id and
/// a fingerprint of its current token), so the server can refuse the URL once that
/// device is revoked or its token re-issued. A URL without it verifies here; the server
/// decides whether it accepts one.
///
/// The method signed for a tus resource is `PATCH`: the same URL also authorises
/// the resource's other tus verbs (HEAD, OPTIONS, DELETE), since tus clients use one
/// URL for all of them. A URL is refused after `expires` and whenever any signed
/// part was changed. Nothing else (no token) is needed to use it.
public struct Presigner: Sendable {
    private let key: [UInt8]
    public init(key: [UInt8]) {
        precondition(key.count >= 32, "a presign key has at least 32 bytes")
        self.key = key
    }

    /// The parts of a presigned URL's query, as parsed by the server.
    public struct Signed: Sendable, Equatable {
        public var method: String
        public var path: String
        public var hash: String
        public var size: Int64
        public var expires: Int64
        /// `<device id>.<token fingerprint>`, when the URL names its device.
        public var device: String?
        public init(method: String, path: String, hash: String, size: Int64, expires: Int64, device: String? = nil) {
            self.method = method; self.path = path; self.hash = hash; self.size = size; self.expires = expires; self.device = device
        }
    }

    public static func canonical(_ s: Signed) -> [UInt8] {
        // The device is a line of its own, after a number: a URL with it never signs the same string as one without.
        Array("vdrive-presign-v1\n\(s.method)\n\(s.path)\n\(s.hash)\n\(s.size)\n\(s.expires)\(s.device.map { "\n" + $0 } ?? "")".utf8)
    }

    public func signature(_ s: Signed) -> String {
        Hex.encode(HMACSHA256.mac(key: key, message: Self.canonical(s)))
    }

    /// Path and query of the presigned URL (no scheme or host).
    public func sign(_ s: Signed) -> String {
        "\(s.path)?hash=\(s.hash)&size=\(s.size)&expires=\(s.expires)\(s.device.map { "&device=" + $0 } ?? "")&sig=\(signature(s))"
    }

    public enum Failure: Error, Sendable, Equatable {
        case missing(String)
        case malformed(String)
        case badSignature
        case expired(at: Int64)

        public var message: String {
            switch self {
            case .missing(let q): return "the presigned URL lacks '\(q)'; ask for a fresh URL with POST /v1/uploads"
            case .malformed(let q): return "the presigned URL's '\(q)' is malformed (\(Self.expected(q))); ask for a fresh URL with POST /v1/uploads"
            case .badSignature: return "the presigned URL's signature does not match (was it altered?); ask for a fresh URL with POST /v1/uploads"
            case .expired(let at): return "the presigned URL expired at \(at) (Unix time); ask for a fresh URL with POST /v1/uploads"
            }
        }

        /// What a well-formed query argument looks like, for error messages.
        static func expected(_ argument: String) -> String {
            switch argument {
            case "hash": return "a block hash: 64 hex digits"
            case "size": return "the block's length: 1 to \(Blocks.size)"
            case "expires": return "Unix seconds, 0 or more"
            case "device": return "a device id, '.', and 16 hex digits"
            default: return "64 hex digits"
            }
        }

        /// The query argument a failure is about, when it is one (for the `field` of a 400).
        public var argument: String? {
            switch self {
            case .missing(let q), .malformed(let q): return q
            case .badSignature, .expired: return nil
            }
        }
    }

    /// Checks a request on `path` with its query arguments; returns the signed values.
    public func verify(method: String, path: String, query: (String) -> String?, now: Int64) throws(Failure) -> Signed {
        guard let hash = query("hash") else { throw .missing("hash") }
        guard let sizeText = query("size") else { throw .missing("size") }
        guard let expiresText = query("expires") else { throw .missing("expires") }
        guard let sig = query("sig") else { throw .missing("sig") }
        // The same bounds as the OpenAPI document's parameters: a block hash, a block's
        // length (1 byte to 4 MiB), a Unix time, 64 hex digits.
        guard SHA256Digest(hex: hash) != nil else { throw .malformed("hash") }
        guard let size = DecimalNumber(parsing: sizeText).int64, size >= 1, size <= Int64(Blocks.size) else { throw .malformed("size") }
        guard let expires = DecimalNumber(parsing: expiresText).int64 else { throw .malformed("expires") }
        let device = query("device")
        if let device, !Self.isDevice(device) { throw .malformed("device") }
        guard sig.utf8.count == 64, let given = Hex.decode(sig), given.count == 32 else { throw .malformed("sig") }
        let signed = Signed(method: method, path: path, hash: hash, size: size, expires: expires, device: device)
        let expected = HMACSHA256.mac(key: key, message: Self.canonical(signed))
        guard HMACSHA256.equal(expected, given) else { throw .badSignature }
        guard now <= expires else { throw .expired(at: expires) }
        return signed
    }

    /// `<id>.<fingerprint>`: a decimal id of 1 to 18 digits (no leading zero), '.', 16 lowercase hex digits.
    public static func isDevice(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let id = parts[0].utf8.first, id != UInt8(ascii: "0"), parts[0].utf8.count <= 18,
              parts[0].utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), parts[1].utf8.count == 16,
              parts[1].utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }) else { return false }
        return true
    }
}
