import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// `GET /v1/blocks/<hash>/chunks`: a stored block's chunk digests, computed once and
/// kept; ranges of the block fetched by chunk check against them.
@Suite(.tags(.logic)) struct ChunkListTests {
    static func digest(_ bytes: ArraySlice<UInt8>) -> SHA256Digest { SHA256Hasher.digest(Array(bytes)) }

    @Test func chunkDigestsOfAFullAndAShortBlockAndTheirRanges() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, name: "v", bytes: randomBytes(Blocks.size + 300_000, seed: 51))
        try s.store(f, at: "v.mov")
        for (i, block) in f.manifest.blocks.enumerated() {
            let start = i * Blocks.size
            let bytes = f.bytes[start..<min(f.bytes.count, start + Blocks.size)]
            let expected = stride(from: bytes.startIndex, to: bytes.endIndex, by: Blocks.chunkSize).map {
                Self.digest(bytes[$0..<min(bytes.endIndex, $0 + Blocks.chunkSize)])
            }
            #expect(try s.client.chunkDigests(block) == expected)
            #expect(expected.count == (i == 0 ? 16 : 2))
            // Each chunk fetched by range hashes to its listed digest.
            for (c, d) in expected.enumerated() {
                let length = min(Blocks.chunkSize, bytes.count - c * Blocks.chunkSize)
                let got = try s.client.blockBytes(block, offset: c * Blocks.chunkSize, length: length)
                #expect(Self.digest(got[...]) == d)
            }
        }
        // Kept: asked again after the block's file is gone, the list still comes from the database.
        let kept = try s.client.chunkDigests(f.manifest.blocks[1])
        let path = s.blobRoot + "/" + f.manifest.blocks[1].hex.prefix(2) + "/" + f.manifest.blocks[1].hex
        #expect(unlink(path) == 0)
        #expect(try s.client.chunkDigests(f.manifest.blocks[1]) == kept)
    }

    @Test func unknownBlockIs404AndADamagedOneIsNotListed() throws {
        let s = try TestServer()
        defer { s.stop() }
        #expect(throws: ClientError.notFound) { try s.client.chunkDigests(SHA256Hasher.digest([1, 2, 3])) }
        let f = TestFile(in: s.dir.path, size: 3000, seed: 52)
        try s.store(f, at: "f")
        s.damageStoredBlock(f)
        // A list of wrong bytes would vouch for them: the server refuses instead.
        #expect(throws: ClientError.self) { try s.client.chunkDigests(f.digest) }
    }
}
