import Testing
import TestTraits
import Crypto

@Suite(.tags(.logic)) struct SHA256Tests {
    // NIST FIPS 180-2 / CAVS known-answer vectors.
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        ("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
    ])
    func knownAnswers(input: String, expected: String) {
        #expect(SHA256Hasher.digest(input).hex == expected)
    }

    @Test func millionAsStreamedInUnevenChunks() {
        let hasher = SHA256Hasher()
        var remaining = 1_000_000
        var step = 1
        while remaining > 0 {
            let n = min(step, remaining)
            hasher.update([UInt8](repeating: 0x61, count: n))
            remaining -= n
            step = step * 3 % 9973 + 1
        }
        #expect(hasher.byteCount == 1_000_000)
        #expect(hasher.finish().hex == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    @Test func digestParsingRejectsNonHex() {
        #expect(SHA256Digest(hex: String(repeating: "g", count: 64)) == nil)
        #expect(SHA256Digest(hex: "abc") == nil)
        let upper = "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"
        #expect(SHA256Digest(hex: upper)?.hex == upper.lowercased())
    }

    // RFC 4231 test case 2.
    @Test func hmacKnownAnswer() {
        let mac = HMACSHA256.mac(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(Hex.encode(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(HMACSHA256.equal(mac, mac))
        var other = mac; other[31] ^= 1
        #expect(!HMACSHA256.equal(mac, other))
    }
}
