import Crypto
import Foundation
import HTTPClient
import ObjectStore
import Testing
import TestTraits
import TestSupport

/// The S3 client and presigned URLs against a real SeaweedFS: the server's own calls,
/// and what the store itself refuses (unsigned, forged, altered, expired, wrong bytes).
@Suite(.tags(.endToEnd), .serialized) struct S3StoreTests {
    static func withStore(_ body: (SeaweedFS, S3Store) throws -> Void) throws {
        let dir = TemporaryDirectory("vdrive-s3")
        defer { dir.remove() }
        let weed = try SeaweedFS(folder: dir.path)
        defer { weed.stop() }
        let store = S3Store(location: try S3Location.parse(weed.storeURL),
                            credentials: S3Credentials(accessKey: weed.accessKey, secretKey: weed.secretKey))
        try store.createBucket()
        try store.createBucket()  // again: ours already, fine
        try body(weed, store)
    }

    static func bytes(_ count: Int, seed: UInt8) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) } }

    @Test func signedCallsPutHeadReadListDelete() throws {
        try Self.withStore { _, store in
            let block = Self.bytes(1_000_003, seed: 7)
            let digest = SHA256Hasher.digest(block)
            try block.withUnsafeBytes { try store.put("blocks/" + digest.hex, bytes: $0, sha256: digest) }
            #expect(try store.head("blocks/" + digest.hex) == Int64(block.count))
            #expect(try store.head("blocks/" + String(repeating: "0", count: 64)) == nil)
            let hasher = SHA256Hasher()
            #expect(try store.read("blocks/" + digest.hex) { hasher.update($0) } == Int64(block.count))
            #expect(hasher.finish() == digest)
            #expect(try store.list(prefix: "blocks/").keys == ["blocks/" + digest.hex])
            // A payload hash that is not the body's. SeaweedFS 4.x stores it anyway (AWS
            // refuses with XAmzContentSHA256Mismatch): so the server never trusts a name it
            // did not verify itself (ObjectBlocks.verify reads and hashes every object).
            let other = SHA256Hasher.digest([1, 2, 3])
            let refused = (try? block.withUnsafeBytes { try store.put("blocks/" + other.hex, bytes: $0, sha256: other) }) == nil
            if !refused {
                let h = SHA256Hasher()
                _ = try store.read("blocks/" + other.hex) { h.update($0) }
                #expect(h.finish() == digest)
                try store.delete("blocks/" + other.hex)
            }
            print("S3StoreTests: the store \(refused ? "refuses" : "accepts") a PUT whose x-amz-content-sha256 is not its body's")
            try store.delete("blocks/" + digest.hex)
            #expect(try store.head("blocks/" + digest.hex) == nil)
        }
    }

    @Test func wrongCredentialsAreDenied() throws {
        try Self.withStore { weed, _ in
            let forged = S3Store(location: try S3Location.parse(weed.storeURL), credentials: S3Credentials(accessKey: weed.accessKey, secretKey: "not-the-secret"))
            #expect(throws: ObjectStoreError.self) { _ = try forged.head("blocks/x") }
            let unsigned = try HTTPConnection().perform(method: "GET", url: weed.endpoint + "/" + weed.bucket + "/")
            #expect(unsigned.status == 403)
        }
    }

    /// PUT with a presigned URL as a device does: the signed headers as they are.
    static func presignedPut(_ request: PresignedRequest, url: String? = nil, headers: [(String, String)]? = nil, body: [UInt8]) throws -> HTTPResult {
        try HTTPConnection().perform(method: "PUT", url: url ?? request.url,
                                     headers: (headers ?? request.headers).filter { $0.0 != "content-length" }.map { "\($0.0): \($0.1)" } + ["Expect:"],
                                     body: .bytes(body))
    }

    @Test func presignedPutIsAcceptedAsSignedAndRefusedOtherwise() throws {
        try Self.withStore { weed, store in
            let block = Self.bytes(300_000, seed: 3)
            let digest = SHA256Hasher.digest(block)
            let key = "blocks/" + digest.hex
            let put = store.presignPut(key, length: Int64(block.count), sha256: digest, expiresIn: 600)

            // Forged: signed with another secret.
            let forger = S3Store(location: store.location, credentials: S3Credentials(accessKey: weed.accessKey, secretKey: "forged"))
            let forged = forger.presignPut(key, length: Int64(block.count), sha256: digest, expiresIn: 600)
            #expect(try Self.presignedPut(forged, body: block).status == 403)
            // Altered: another key in the same signed URL.
            let otherKey = put.url.replacingOccurrences(of: digest.hex, with: String(repeating: "a", count: 64))
            #expect(try Self.presignedPut(put, url: otherKey, body: block).status == 403)
            // Altered: another expiry.
            let longer = put.url.replacingOccurrences(of: "X-Amz-Expires=600", with: "X-Amz-Expires=6000")
            #expect(try Self.presignedPut(put, url: longer, body: block).status == 403)
            // Expired: signed an hour ago for a minute.
            let old = store.presignPut(key, length: Int64(block.count), sha256: digest, expiresIn: 60, now: Int64(time(nil)) - 3600)
            #expect(try Self.presignedPut(old, body: block).status == 403)
            // The signed checksum header left out or changed.
            #expect(try Self.presignedPut(put, headers: [], body: block).status == 403)
            let otherSum = [("x-amz-checksum-sha256", Base64.encode(SHA256Hasher.digest([9]).bytes))]
            #expect(try Self.presignedPut(put, headers: otherSum, body: block).status == 403)
            #expect(try store.head(key) == nil)

            // Other bytes of the same length under the URL of this block: the store checks
            // x-amz-checksum-sha256 against the body, or (if a store does not) the server's
            // verification does; record here which this store does.
            var lie = block
            lie[0] ^= 0xff
            let lied = try Self.presignedPut(put, body: lie)
            print("S3StoreTests: the store answers \(lied.status) to a presigned PUT whose bytes are not its signed x-amz-checksum-sha256")
            if lied.status == 200 {
                let h = SHA256Hasher()
                _ = try store.read(key) { h.update($0) }
                #expect(h.finish() != digest, "the store kept other bytes under the block's name: the server's verification must catch this")
                try store.delete(key)
            } else {
                #expect(lied.status == 400)
            }

            // As signed: stored.
            #expect(try Self.presignedPut(put, body: block).status == 200)
            #expect(try store.head(key) == Int64(block.count))
            // A presigned GET reads it, with a Range.
            let get = store.presignGet(key, expiresIn: 600)
            let ranged = try HTTPConnection().perform(method: "GET", url: get.url, headers: ["Range: bytes=10-19"])
            #expect(ranged.status == 206)
            #expect(ranged.body == Array(block[10...19]))
        }
    }
}
