import Crypto
import Protocol
import Testing

@Suite(.tags(.logic)) struct PresignTests {
    let presigner = Presigner(key: Array(repeating: 7, count: 32))
    let signed = Presigner.Signed(method: "PATCH", path: "/v1/tus/abc", hash: String(repeating: "ab", count: 32), size: 1234, expires: 2_000_000_000)

    func query(_ url: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in url.split(separator: "?")[1].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            out[String(kv[0])] = String(kv[1])
        }
        return out
    }

    @Test func signedURLVerifies() throws {
        let url = presigner.sign(signed)
        #expect(url.hasPrefix("/v1/tus/abc?hash="))
        let q = query(url)
        let back = try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1_999_999_999)
        #expect(back == signed)
    }

    @Test(arguments: ["hash", "size", "expires", "sig"])
    func tamperedPartIsRefused(_ part: String) {
        var q = query(presigner.sign(signed))
        switch part {
        case "hash": q["hash"] = String(repeating: "cd", count: 32)
        case "size": q["size"] = "1235"
        case "expires": q["expires"] = "2000000001"
        default: q["sig"] = String(repeating: "0", count: 64)
        }
        #expect(throws: Presigner.Failure.badSignature) {
            try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1)
        }
    }

    @Test func otherPathMethodOrKeyIsRefused() {
        let q = query(presigner.sign(signed))
        #expect(throws: Presigner.Failure.badSignature) { try presigner.verify(method: "PATCH", path: "/v1/tus/abd", query: { q[$0] }, now: 1) }
        #expect(throws: Presigner.Failure.badSignature) { try presigner.verify(method: "GET", path: "/v1/tus/abc", query: { q[$0] }, now: 1) }
        let other = Presigner(key: Array(repeating: 8, count: 32))
        #expect(throws: Presigner.Failure.badSignature) { try other.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1) }
    }

    @Test func expiredURLIsRefused() {
        let q = query(presigner.sign(signed))
        #expect(throws: Presigner.Failure.expired(at: 2_000_000_000)) {
            try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 2_000_000_001)
        }
    }

    @Test func missingAndMalformedParts() {
        var q = query(presigner.sign(signed))
        q["sig"] = nil
        #expect(throws: Presigner.Failure.missing("sig")) { try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1) }
        q = query(presigner.sign(signed))
        q["size"] = "-1"
        #expect(throws: Presigner.Failure.malformed("size")) { try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1) }
        q = query(presigner.sign(signed))
        q["sig"] = "zz"
        #expect(throws: Presigner.Failure.malformed("sig")) { try presigner.verify(method: "PATCH", path: "/v1/tus/abc", query: { q[$0] }, now: 1) }
    }
}

@Suite(.tags(.logic)) struct ValidationTests {
    @Test(arguments: ["Camera Roll/IMG_0001.jpg", "a", "a/b/c", "été/photo.jpg", "a..b/c"])
    func goodPaths(_ p: String) throws {
        #expect(try Validation.path(p) == p)
    }

    @Test(arguments: ["", "/etc/passwd", "a/../b", "..", "a/./b", "a//b", "a/", "a\u{0}b"])
    func badPaths(_ p: String) {
        #expect(throws: ValidationError.self) { try Validation.path(p) }
    }

    @Test func invalidUTF8IsRefused() throws {
        #expect(throws: ValidationError.self) { try Validation.path(bytes: [0x61, 0xff, 0x62]) }
        #expect(try Validation.path(bytes: Array("ok/x".utf8)) == "ok/x")
    }

    @Test(arguments: ["", "abc", String(repeating: "g", count: 64), String(repeating: "a", count: 63), String(repeating: "a", count: 65)])
    func badHashes(_ h: String) {
        #expect(throws: ValidationError.self) { try Validation.hash(h) }
    }

    @Test func hashIsLowercased() throws {
        #expect(try Validation.hash(String(repeating: "AB", count: 32)).hex == String(repeating: "ab", count: 32))
    }

    @Test func base64RoundTrip() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.encode(Array("hello".utf8)) == "aGVsbG8=")
        #expect(Tus.parseMetadata("sha256 YWJj,empty")?["sha256"] == Array("abc".utf8))
    }

    @Test func hashListIsTheJSONOfPresentRequest() throws {
        let hexes = (0..<3).map { SHA256Hasher.digest("x\($0)").hex }
        #expect(try WireJSON.decode(PresentRequest.self, from: WireJSON.hashList("hashes", hexes)).hashes == hexes)
        #expect(try WireJSON.decode(PresentResponse.self, from: WireJSON.hashList("present", [])).present == [])
    }

    @Test func httpDate() {
        #expect(HTTPDate.format(0) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(1_795_988_493) == "Sun, 29 Nov 2026 21:41:33 GMT")
    }
}
