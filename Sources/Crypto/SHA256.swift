/// Crypto: SHA-256 and HMAC-SHA256 over OpenSSL's libcrypto.
///
/// Terms: a `SHA256Digest` is 32 bytes, shown as 64 lowercase hex digits.
/// Thread safety: a `SHA256Hasher` belongs to one thread at a time (it is a
/// stateful stream); digests and the one-shot functions are free to share.
/// Imports: CCrypto only.
import CCrypto

/// A SHA-256 digest. Compared, hashed and printed as 64 lowercase hex digits.
public struct SHA256Digest: Hashable, Sendable, CustomStringConvertible {
    public let hex: String

    public init(bytes: [UInt8]) {
        precondition(bytes.count == 32, "a SHA-256 digest is 32 bytes")
        self.hex = Hex.encode(bytes)
    }

    /// Accepts exactly 64 hex digits (either case); nil otherwise.
    public init?(hex: String) {
        guard hex.utf8.count == 64, hex.utf8.allSatisfy(Hex.isHexDigit) else { return nil }
        self.hex = hex.lowercased()
    }

    public var bytes: [UInt8] { Hex.decode(hex)! }
    public var description: String { hex }
}

/// Streaming SHA-256: feed bytes as they arrive, then `finish()` once.
/// `@unchecked Sendable`: the EVP context is owned by this object and the
/// users of a hasher (the drive's open-file state) serialise access to it.
public final class SHA256Hasher: @unchecked Sendable {
    private let context: OpaquePointer
    public private(set) var byteCount: UInt64 = 0
    private var finished = false

    public init() {
        guard let ctx = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed: out of memory") }
        context = ctx
        precondition(EVP_DigestInit_ex(context, sha256Algorithm, nil) == 1, "EVP_DigestInit_ex(sha256) failed")
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ buffer: UnsafeRawBufferPointer) {
        precondition(!finished, "SHA256Hasher.update after finish")
        guard buffer.count > 0 else { return }
        precondition(EVP_DigestUpdate(context, buffer.baseAddress, buffer.count) == 1, "EVP_DigestUpdate failed")
        byteCount += UInt64(buffer.count)
    }

    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { update($0) }
    }

    /// A second hasher that has seen what this one has; the two then go on apart.
    public func copy() -> SHA256Hasher {
        precondition(!finished, "SHA256Hasher.copy after finish")
        let other = SHA256Hasher()
        precondition(EVP_MD_CTX_copy_ex(other.context, context) == 1, "EVP_MD_CTX_copy_ex failed")
        other.byteCount = byteCount
        return other
    }

    public func finish() -> SHA256Digest {
        precondition(!finished, "SHA256Hasher.finish called twice")
        finished = true
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        precondition(EVP_DigestFinal_ex(context, &out, &length) == 1 && length == 32, "EVP_DigestFinal_ex failed")
        return SHA256Digest(bytes: out)
    }

    public static func digest(_ bytes: [UInt8]) -> SHA256Digest {
        let h = SHA256Hasher()
        h.update(bytes)
        return h.finish()
    }

    public static func digest(_ string: String) -> SHA256Digest { digest(Array(string.utf8)) }
}

/// SHA-256 from OpenSSL's default provider, looked up once. `EVP_sha256()` is a legacy
/// handle that OpenSSL 3 looks up again in its provider tables at every `EVP_DigestInit_ex`
/// (a lock and a hash-table search): about 1% of the CPU of a device or a server that
/// hashes one small block after another.
nonisolated(unsafe) private let sha256Algorithm: OpaquePointer = {
    guard let md = EVP_MD_fetch(nil, "SHA2-256", nil) else { fatalError("OpenSSL has no SHA2-256 (EVP_MD_fetch)") }
    return md
}()

/// HMAC-SHA256 (RFC 2104) for presigned URLs and token checks.
public enum HMACSHA256 {
    public static func mac(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = key.withUnsafeBytes { k in
            message.withUnsafeBytes { m in
                HMAC(EVP_sha256(), k.baseAddress, Int32(k.count),
                     m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count, &out, &length)
            }
        }
        precondition(ok != nil && length == 32, "HMAC-SHA256 failed")
        return out
    }

    /// Compares two MACs in constant time, so a forger learns nothing from timing.
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) == 0 } }
    }
}

/// Cryptographically strong random bytes (device tokens, upload ids, signing keys).
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        precondition(RAND_bytes(&out, Int32(count)) == 1, "RAND_bytes failed")
        return out
    }
}
