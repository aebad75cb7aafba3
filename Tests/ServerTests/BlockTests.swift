import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

/// Contents in blocks: block-level dedup, resume per block, the commit of a manifest
/// with its file, identity checks, zero blocks and ranged reads across blocks.
@Suite(.tags(.endToEnd)) struct BlockTests {
    let size = Blocks.size

    /// A second content sharing two of its three blocks with the first sends only the third.
    @Test(arguments: Records.all) func secondContentSendsOnlyItsNewBlocks(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let shared = randomBytes(2 * size, seed: 31)
        let a = TestFile(in: s.dir.path, name: "a", bytes: shared + randomBytes(1000, seed: 32))
        let b = TestFile(in: s.dir.path, name: "b", bytes: shared + randomBytes(5000, seed: 33))
        try s.store(a, at: "a.mov")
        #expect(s.blockCount() == 3)
        guard case .blocks(let plan, _) = try s.client.createUpload(content: b.content, size: b.size, blocks: b.manifest.blocks) else {
            throw TestFailure("b is a new content")
        }
        #expect(plan.map(\.index) == [2])
        #expect(plan.first?.length == 5000)
        let fd = b.open()
        defer { close(fd) }
        var reached: [Int64] = []
        try s.client.uploadFile(fd: fd, size: b.size, progress: { n in reached.append(n); return true })
        // Progress is the file offset reached: every value lies in the last block, so nothing before it was sent.
        #expect(reached.max() == b.size)
        #expect(reached.allSatisfy { $0 >= 2 * Int64(size) })
        #expect(s.blockCount() == 4)
        try s.record(b, at: "b.mov", sequence: 2)
        #expect(try s.client.presentContents([a.content, b.content]) == [a.content, b.content])
        // The same content again (another path, another device) is whole-file dedup.
        #expect(try s.client.createUpload(content: a.content, size: a.size, blocks: a.manifest.blocks) == .present)
        let out = open(s.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: b.content, to: out) == b.size)
        #expect(FileManager.default.contents(atPath: s.dir.path + "/out") == Data(b.bytes))
    }

    /// A file that repeats a block lists it once in the plan.
    @Test(arguments: Records.all) func aRepeatedBlockIsSentOnce(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let block = randomBytes(size, seed: 34)
        let f = TestFile(in: s.dir.path, name: "twice", bytes: block + block + Array(block[0..<10]))
        #expect(f.manifest.blocks[0] == f.manifest.blocks[1])
        guard case .blocks(let plan, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("new content") }
        #expect(plan.map(\.index) == [0, 2])
        try s.store(f, at: "twice")
        #expect(s.blockCount() == 2)
        let out = open(s.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: f.content, to: out) == f.size)
    }

    /// A block half sent is resumed from the server's offset; blocks already there are not sent again.
    @Test(arguments: Records.all) func aResumedUploadSendsOnlyWhatIsMissing(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 2 * size + 77, seed: 35)
        let fd = f.open()
        defer { close(fd) }
        guard case .blocks(let plan, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("new content") }
        #expect(plan.map(\.index) == [0, 1, 2])
        try s.client.uploadBlock(plan[0], fd: fd)
        let half = Int64(size / 2)
        #expect(try s.client.patch(url: plan[1].url, offset: 0, fd: fd, fileOffset: plan[1].fileOffset, length: half) == half)
        // As after a restart of the device: ask again.
        guard case .blocks(let rest, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("new content") }
        #expect(rest.map(\.index) == [1, 2])
        #expect(rest.map(\.offset) == [half, 0])
        #expect(rest.reduce(0) { $0 + $1.length - $1.offset } == Int64(size) - half + 77)
        for t in rest { try s.client.uploadBlock(t, fd: fd) }
        try s.record(f, at: "resumed")
        let out = open(s.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: f.content, to: out) == f.size)
    }

    /// Recording a file whose blocks are not all stored is refused with the list of the
    /// missing ones, and nothing becomes visible.
    @Test(arguments: Records.all) func missingBlocksAre409WithTheList(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 2 * size + 5, seed: 36)
        let fd = f.open()
        defer { close(fd) }
        guard case .blocks(let plan, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("new content") }
        try s.client.uploadBlock(plan[1], fd: fd)
        #expect(throws: ClientError.missingBlocks([f.manifest.blocks[0], f.manifest.blocks[2]])) { try s.record(f, at: "x") }
        let raw = try s.json("POST", "/v1/files", #"{"path":"x","hash":"\#(f.content.hex)","size":\#(f.size),"blocks":[\#(f.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ","))],"mtime":1,"deviceSequence":1}"#)
        #expect(raw.status == 409)
        #expect(raw.error?.error == "missing_blocks")
        #expect(Set(raw.error?.missing ?? []) == [f.manifest.blocks[0].hex, f.manifest.blocks[2].hex])
        #expect(try s.client.listFiles(prefix: "").isEmpty)
        #expect(try s.client.presentContents([f.content]).isEmpty)
        #expect(try s.send("GET", "/v1/contents/\(f.content.hex)").status == 404)
        #expect(ClientError.missingBlocks([]).isTransient)  // upload them, then record again
        try s.client.uploadFile(fd: fd, size: f.size)
        try s.record(f, at: "x")
        #expect(try s.client.listFiles(prefix: "").map(\.hash) == [f.content.hex])
    }

    /// The server checks a manifest's identity: a 422 naming the field (each value fits
    /// the schema; together they contradict each other), never a 500.
    @Test(arguments: Records.all) func identityMismatchIs422(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: size + 1, seed: 37)
        let blocks = f.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ",")
        // The sha256sum of the bytes is not the content hash.
        let sha = try s.json("POST", "/v1/uploads", #"{"content":"\#(f.digest.hex)","size":\#(f.size),"blocks":[\#(blocks)]}"#)
        #expect(sha.status == 422)
        #expect(sha.error?.error == "content_mismatch")
        #expect(sha.error?.field == "content")
        #expect(sha.error?.message.contains(f.content.hex) == true)
        // Blocks in the wrong order: another content hash.
        let swapped = try s.json("POST", "/v1/uploads", #"{"content":"\#(f.content.hex)","size":\#(f.size),"blocks":["\#(f.manifest.blocks[1].hex)","\#(f.manifest.blocks[0].hex)"]}"#)
        #expect(swapped.error?.error == "content_mismatch")
        // A count that does not fit the size.
        let count = try s.json("POST", "/v1/uploads", #"{"content":"\#(f.content.hex)","size":\#(size),"blocks":[\#(blocks)]}"#)
        #expect(count.status == 422)
        #expect(count.error?.field == "blocks")
        // Size 0 with a hash that is not the empty content's: 422, not 500.
        let empty = try s.json("POST", "/v1/uploads", #"{"content":"\#(f.digest.hex)","size":0,"blocks":[]}"#)
        #expect(empty.status == 422)
        #expect(empty.error?.error == "content_mismatch")
        #expect(throws: ClientError.http(status: 422, message: sha.error?.message ?? "")) {
            try s.client.createUpload(content: f.digest, size: f.size, blocks: f.manifest.blocks)
        }
        // A known content asked with another size (its block count the same): 409.
        let small = TestFile(in: s.dir.path, size: 100, seed: 38)
        try s.store(small, at: "small")
        let other = try s.json("POST", "/v1/uploads", #"{"content":"\#(small.content.hex)","size":101,"blocks":["\#(small.digest.hex)"]}"#)
        #expect(other.status == 409)
        #expect(other.error?.error == "size_conflict")
        // One block listed at two lengths (a full position and the short last one): 422.
        let misplaced = ContentHash.of(blocks: [small.digest, small.digest])
        let atZero = try s.json("POST", "/v1/uploads", #"{"content":"\#(misplaced.hex)","size":\#(size + 100),"blocks":["\#(small.digest.hex)","\#(small.digest.hex)"]}"#)
        #expect(atZero.status == 422)
        #expect(atZero.error?.field?.hasPrefix("blocks.") == true)
    }

    /// Zero blocks are never stored or sent, count as present, and read as zeros, also
    /// in a range that crosses from a stored block into a hole and out of it.
    @Test(arguments: Records.all) func zeroBlocksAndRangesAcrossBlocks(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let head = randomBytes(size, seed: 39), tail = randomBytes(1000, seed: 40)
        let bytes = head + [UInt8](repeating: 0, count: size) + tail
        let f = TestFile(in: s.dir.path, name: "sparse", bytes: bytes)
        #expect(f.manifest.blocks[1] == Blocks.zeroDigest(length: size))
        guard case .blocks(let plan, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("new content") }
        #expect(plan.map(\.index) == [0, 2])
        try s.store(f, at: "sparse.img")
        #expect(s.blockCount() == 2)
        #expect(try !s.hasBlock(f.manifest.blocks[1]))
        let manifest = try s.client.contentBlocks(f.content)
        #expect(manifest == f.manifest)
        let raw = try WireJSON.decode(ContentBlocksResponse.self, from: try s.send("GET", "/v1/contents/\(f.content.hex)/blocks").body)
        #expect(raw.blocks.count == 3 && raw.size == f.size)

        let whole = try s.send("GET", "/v1/contents/\(f.content.hex)")
        #expect(whole.status == 200)
        #expect(whole.body == bytes)
        let ranges: [ClosedRange<Int64>] = [
            Int64(size) - 100...Int64(size) + 99,          // stored block into the hole
            2 * Int64(size) - 50...2 * Int64(size) + 49,    // the hole into the last block
            Int64(size) + 10...Int64(size) + 20,            // inside the hole
            10...5000,                                       // inside one block (sent from its file)
            0...Int64(bytes.count - 1),                      // all of it, as a range
        ]
        for r in ranges {
            let part = try s.send("GET", "/v1/contents/\(f.content.hex)", headers: ["Range: bytes=\(r.lowerBound)-\(r.upperBound)"])
            #expect(part.status == 206, "\(r)")
            #expect(part.header("Content-Range") == "bytes \(r.lowerBound)-\(r.upperBound)/\(f.size)")
            #expect(part.body == Array(bytes[Int(r.lowerBound)...Int(r.upperBound)]), "\(r)")
        }
        let out = open(s.dir.path + "/range", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: f.content, range: Int64(size) - 3...Int64(size) + 3, to: out) == 7)
        #expect(FileManager.default.contents(atPath: s.dir.path + "/range") == Data(bytes[(size - 3)...(size + 3)]))
        let head206 = try s.send("HEAD", "/v1/contents/\(f.content.hex)")
        #expect(head206.header("Content-Length") == "\(f.size)")
        // Blocks one by one, each checked against its hash.
        let blockOut = open(s.dir.path + "/block", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(blockOut) }
        #expect(try s.client.downloadBlock(f.manifest.blocks[0], to: blockOut) == Int64(size))
        #expect(try s.client.downloadBlock(f.manifest.blocks[2], range: 10...19, to: blockOut) == 10)
        #expect(throws: ClientError.notFound) { try s.client.downloadBlock(f.manifest.blocks[1], to: blockOut) }
    }

    /// A whole download that does not hash to its content hash is reported, not accepted.
    @Test(arguments: Records.all) func aDamagedBlockIsCaughtByTheClient(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 3000, seed: 41)
        try s.store(f, at: "f")
        s.damageStoredBlock(f)
        let out = open(s.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(throws: ClientError.self) { try s.client.download(content: f.content, to: out) }
        #expect(throws: ClientError.self) { try s.client.downloadBlock(f.digest, to: out) }
    }
}

/// The content hash's definition, with the test vector of Docs/protocol.md.
@Suite(.tags(.logic)) struct ContentHashVectorTests {
    @Test func vector() {
        let n = Blocks.size + 1
        let bytes = (0..<n).map { UInt8($0 % 251) }
        let hasher = ContentHasher()
        bytes.withUnsafeBytes { hasher.update($0) }
        let (content, blocks) = hasher.finish()
        #expect(blocks.map(\.hex) == ["a117210941a0b00dcb2d8577e680d84b6fa0eaf760d2afc654c953b9859d54fa",
                                      "74cd9ef9c7e15f57bdad73c511462ca65cb674c46c49639c60f1b44650fa1dcb"])
        #expect(content.hex == "4a6cc0a344febaa07772e7c974834b2fb1d24594d4ba15f27c97a54699709f44")
        #expect(SHA256Hasher.digest(bytes).hex == "f4711f6bc42a8dc6520e30e306743855a82c7bdecd6e7d3edfb04b6f4524f7bd")  // sha256sum: not the same
        #expect(ContentHash.of(blocks: []).hex == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(ContentHash.of(bytes: Array("hello\n".utf8)).hex == "ecb65bb98f9d905b70458986c39fcbad7715e5f2fcc3b1f07767d7c83e2438cc")
        #expect(Blocks.zeroDigest(length: Blocks.size).hex == "bb9f8df61474d25e71fa00722318cd387396ca1736605e1248821cc0de3d3af8")
    }
}
