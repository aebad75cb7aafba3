import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing
import TestTraits
#if canImport(Glibc)
import Glibc
#endif

/// Block packs (`POST /v1/blocks`, `POST /v1/blocks/fetch`) against a real `vdrive serve`
/// on both back ends: the embedded one (SQLite, blocks in its folder: staged files, one
/// syncfs) and the scaled one (PostgreSQL, blocks in a real SeaweedFS the server PUTs to).
@Suite(.tags(.endToEnd), .serialized) struct BlockPackTests {
    /// A `vdrive serve` process on `backend` with one device, in a fresh folder.
    final class PackServer: @unchecked Sendable { // set up once, then only read
        let dir = TemporaryDirectory()
        let store: ScaledStoreTests.Store?
        let process: ServerProcess
        let client: WorkspaceClient
        let token: String
        let raw = HTTPConnection()

        init(_ backend: Backend, extra: [String] = []) throws {
            store = backend == .scaled ? try ScaledStoreTests.Store() : nil
            do {
                let backends = try store?.scaledBackends()
                let database = backends.map { DatabaseLocation.postgres(connectionString: $0.database) }
                token = try DeviceRegistry(dataDirectory: dir.path + "/data", database: database).add("laptop")
                process = try ServerProcess(data: dir.path + "/data", extra: (backends?.options ?? []) + extra)
                client = WorkspaceClient(baseURL: process.base, token: token)
            } catch { store?.stop(); dir.remove(); throw error }
        }

        func remove() {
            process.kill()
            store?.stop()
            dir.remove()
        }

        /// The server's staging folder's entries (none on a server at rest).
        var staging: [String] { (try? FileManager.default.contentsOfDirectory(atPath: dir.path + "/data/blobs/staging")) ?? [] }

        /// The embedded store's pack file (its server's, the first): its length, and the bytes the disk holds for it
        /// (ranges given up are punched: they hold none).
        var pack: (size: Int64, allocated: Int64) {
            var st = stat()
            guard stat(dir.path + "/data/blobs/packs/1.pack", &st) == 0 else { return (0, 0) }
            return (Int64(st.st_size), Int64(st.st_blocks) * 512)
        }

        /// A raw pack upload of `body` (for what the typed client never sends).
        func sendPack(_ body: [UInt8], headers: [String] = ["Content-Type: \(BlockPack.mediaType)"]) throws -> HTTPResult {
            try raw.perform(method: "POST", url: process.base + API.blockPack, headers: ["Authorization: Bearer \(token)", "Expect:"] + headers, body: .bytes(body))
        }

        func fetch(_ json: String) throws -> HTTPResult {
            try raw.perform(method: "POST", url: process.base + API.blockPackFetch, headers: ["Authorization: Bearer \(token)", "Content-Type: application/json", "Expect:"],
                            body: .bytes(Array(json.utf8)))
        }

        /// True when the workspace has block `d` (200, or 307 to the object store).
        func has(_ d: SHA256Digest) throws -> Bool {
            [200, 307].contains(try raw.perform(method: "HEAD", url: process.base + "/v1/blocks/" + d.hex, headers: ["Authorization: Bearer \(token)"]).status)
        }
    }

    /// Blocks as files, for `sendBlockPack`: random bytes from `seed`, sizes 1 B to 64 KiB,
    /// and `whole` of a full 4 MiB.
    final class BlockFiles {
        let bytes: [[UInt8]]
        let digests: [SHA256Digest]
        let fds: [Int32]

        init(in dir: String, count: Int, whole: Int = 0, seed: UInt64) {
            var rng = SeededGenerator(seed: seed)
            bytes = (0..<count).map { i in
                randomBytes(i < whole ? Blocks.size : Int.random(in: 1...(64 << 10), using: &rng), seed: seed &* 1000 &+ UInt64(i))
            }
            digests = bytes.map(SHA256Hasher.digest)
            fds = bytes.enumerated().map { i, b in
                let path = "\(dir)/block-\(seed)-\(i)"
                writeFile(path, b)
                return open(path, O_RDONLY)
            }
        }

        var list: [(digest: SHA256Digest, fd: Int32, length: Int)] { (0..<bytes.count).map { (digests[$0], fds[$0], bytes[$0].count) } }
        func close() { fds.forEach { Glibc.close($0) } }
    }

    /// Small blocks a device keeps in its catalog go up from memory, in the same pack as
    /// blocks read from files, and come back byte-identical; bytes that are not their
    /// digest's are refused as from a file.
    @Test(arguments: Backend.allCases) func blocksFromMemoryAndFromFilesShareAPackAndComeBack(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        let blocks = BlockFiles(in: s.dir.path, count: 40, whole: 1, seed: 17); defer { blocks.close() }
        let mixed = (0..<40).map { i in
            (digest: blocks.digests[i], bytes: i % 2 == 0 ? OutgoingBlockBytes.memory(blocks.bytes[i]) : .file(blocks.fds[i]), length: blocks.bytes[i].count)
        }
        let sent = try s.client.sendBlockPack(mixed)
        #expect(sent.stored == 40 && sent.present == 0)
        var got = 0
        try s.client.fetchBlockPack(blocks.digests) { digest, bytes in
            #expect(blocks.bytes[got].elementsEqual(bytes), "block \(got) (\(digest.hex)) came back different")
            got += 1
        }
        #expect(got == 40)

        var wrong = randomBytes(3000, seed: 18)
        let digest = SHA256Hasher.digest(wrong)
        wrong[1500] ^= 1
        #expect { try s.client.sendBlockPack([(digest: digest, bytes: OutgoingBlockBytes.memory(wrong), length: wrong.count)]) } throws: { error in
            if case ClientError.contentMismatch = error { return true } else { return false }
        }
        #expect(try !s.has(digest))
    }

    @Test(arguments: Backend.allCases) func aPackGoesUpAndComesBackByteIdentical(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        // 200 small blocks and 4 whole ones: over 16 MiB, so the client sends two packs.
        let blocks = BlockFiles(in: s.dir.path, count: 204, whole: 4, seed: 11); defer { blocks.close() }
        let sent = try s.client.sendBlockPack(blocks.list)
        #expect(sent.stored == 204 && sent.present == 0)
        for d in blocks.digests { #expect(try s.has(d), "block \(d.hex) is not present after its pack") }
        #expect(s.staging.isEmpty, "staging files left: \(s.staging)")

        // Fetched back: every block six times over (1,224 hashes, 130 MiB): more than one
        // fetch may ask for or answer, so the client asks in several, halving on 413.
        let asked = Array(repeating: blocks.digests, count: 6).flatMap { $0 }
        let index = Dictionary(blocks.digests.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        var got: [SHA256Digest] = []
        try s.client.fetchBlockPack(asked) { digest, bytes in
            got.append(digest)
            #expect(index[digest].map { blocks.bytes[$0].elementsEqual(bytes) } == true, "block \(digest.hex) came back different")
        }
        #expect(got == asked)

        // What `into` throws comes out as it is, at the first block as at the last.
        struct Enough: Error, Equatable {}
        #expect(throws: Enough()) { try s.client.fetchBlockPack(Array(blocks.digests[0..<50])) { _, _ in throw Enough() } }
        var handed = 0
        #expect(throws: Enough()) {
            try s.client.fetchBlockPack(Array(blocks.digests[0..<50])) { _, _ in
                handed += 1
                if handed == 50 { throw Enough() }
            }
        }

        // The raw reply is the pack format exactly, in the order asked.
        let some = [blocks.digests[7], blocks.digests[0], blocks.digests[7]]
        let reply = try s.fetch(String(decoding: WireJSON.encode(BlockPackRequest(hashes: some.map(\.hex))), as: UTF8.self))
        #expect(reply.status == 200 && reply.header("Content-Type") == BlockPack.mediaType)
        #expect(reply.body == BlockPack.encode([blocks.bytes[7], blocks.bytes[0], blocks.bytes[7]]))
    }

    @Test(arguments: Backend.allCases) func aBadDigestInTheMiddleStoresNothingAndNamesTheRecord(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        let blocks = (0..<10).map { randomBytes(1000 + $0 * 100, seed: 70 + UInt64($0)) }
        var body: [UInt8] = []
        for (i, b) in blocks.enumerated() {
            body += BlockPack.header(SHA256Hasher.digest(b), length: b.count)
            var sent = b
            if i == 5 { sent[17] ^= 1 }  // the bytes are not the block the record names
            body += sent
        }
        let reply = try s.sendPack(body)
        #expect(reply.status == 400 && reply.error?.error == "block_checksum_mismatch", "\(reply.status) \(reply.text)")
        #expect(reply.text.contains("record 5 "), "the message names the record: \(reply.text)")
        for b in blocks { #expect(try !s.has(SHA256Hasher.digest(b)), "a block of a refused pack was stored") }
        #expect(s.staging.isEmpty, "staging files left: \(s.staging)")

        // The typed client: a file that changed since it was hashed is `.contentMismatch`.
        let files = BlockFiles(in: s.dir.path, count: 3, seed: 12); defer { files.close() }
        var list = files.list
        list[1].digest = SHA256Hasher.digest("not these bytes")
        do {
            try s.client.sendBlockPack(list)
            Issue.record("a pack with a block that is not its digest's was accepted")
        } catch {
            guard case .contentMismatch(let message) = error else { Issue.record("expected contentMismatch, got \(error)"); return }
            #expect(message.contains("record 1 "))
        }
    }

    @Test(arguments: Backend.allCases) func aPackCutShortLeavesNothingAndTheServerGoesOn(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        let blocks = (0..<4).map { randomBytes(40_000, seed: 90 + UInt64($0)) }
        let pack = BlockPack.encode(blocks)
        // The connection drops in the middle of record 2 (records 0 and 1 are whole).
        let connection = try RawConnection(port: s.process.port)
        let head = "POST \(API.blockPack) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(s.token)\r\nContent-Type: \(BlockPack.mediaType)\r\nContent-Length: \(pack.count)\r\n\r\n"
        #expect(connection.send(Array(head.utf8) + pack[0..<(2 * 40_036 + 20_000)]))
        // Until the server has received what was sent (bytes of record 2, in the pack file
        // after the 40 KiB ranges of records 0 and 1), then gone.
        if backend == .embedded { try eventually("the server writes the records sent") { s.pack.size > 2 * 40_960 } }
        connection.close(reset: true)
        if backend == .embedded { try eventually("the server frees every range of the pack cut short") { s.pack.allocated == 0 } }
        #expect(s.staging.isEmpty)
        for b in blocks { #expect(try !s.has(SHA256Hasher.digest(b)), "a block of a pack cut short was stored") }

        // A body that ends inside a record although its Content-Length says so: 400 naming it.
        let short = try s.sendPack(Array(pack[0..<(40_036 + 100)]))
        #expect(short.status == 400 && short.text.contains("record 1 "), "\(short.status) \(short.text)")
        let inHeader = try s.sendPack(Array(pack[0..<(40_036 + 10)]))
        #expect(inHeader.status == 400 && inHeader.text.contains("record 1 "), "\(inHeader.status) \(inHeader.text)")

        // The server goes on: the same pack whole is stored.
        let whole = try s.sendPack(pack)
        #expect(whole.status == 200, "\(whole.status) \(whole.text)")
        #expect(try WireJSON.decode(BlockPackResponse.self, from: whole.body) == BlockPackResponse(stored: 4, present: 0))
        #expect(s.staging.isEmpty)
        if backend == .embedded { #expect(s.pack.allocated >= 4 * 40_000, "the blocks stored are in the pack file") }
    }

    @Test(arguments: Backend.allCases) func presentBlocksAreSkippedAndAnotherLengthIsAConflict(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        let files = BlockFiles(in: s.dir.path, count: 5, seed: 13); defer { files.close() }
        let first = try s.client.sendBlockPack(Array(files.list[0..<3]))
        #expect(first.stored == 3 && first.present == 0)
        // Three present, two new, and one of the new twice.
        let second = try s.client.sendBlockPack(files.list + [files.list[4]])
        #expect(second.stored == 2 && second.present == 4)
        #expect(try s.client.sendBlockPack(files.list) == (stored: 0, present: 5))
        #expect(s.staging.isEmpty)

        // A record naming a stored block with another length: 409 naming it, nothing stored.
        let fresh = randomBytes(3000, seed: 14)
        let stored = files.bytes[2]
        let body = BlockPack.encode([fresh]) + BlockPack.header(files.digests[2], length: stored.count + 1) + stored + [7]
        let reply = try s.sendPack(body)
        #expect(reply.status == 409 && reply.error?.error == "size_conflict" && reply.text.contains("record 1 ") && reply.text.contains(files.digests[2].hex),
                "\(reply.status) \(reply.text)")
        #expect(try !s.has(SHA256Hasher.digest(fresh)))
    }

    @Test(arguments: Backend.allCases) func oversizeZeroAndMalformedPacksAreRefused(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        // Over 16 MiB: 413 from the headers, before a byte of the body is read.
        let connection = try RawConnection(port: s.process.port)
        connection.send(Array("POST \(API.blockPack) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(s.token)\r\nContent-Type: \(BlockPack.mediaType)\r\nContent-Length: \(API.maxPackBody + 1)\r\n\r\n".utf8))
        let tooLarge = try #require(connection.reply(timeout: 10))
        #expect(tooLarge.status == 413 && tooLarge.text.contains("16 MiB"), "\(tooLarge.status) \(tooLarge.text)")
        connection.close()

        let good = randomBytes(500, seed: 15)
        func refused(_ body: [UInt8], _ status: Int, _ words: String, headers: [String] = ["Content-Type: \(BlockPack.mediaType)"]) throws {
            let reply = try s.sendPack(body, headers: headers)
            #expect(reply.status == status && reply.text.contains(words), "expected \(status) with '\(words)', got \(reply.status) \(reply.text)")
        }
        let zeros = [UInt8](repeating: 0, count: 4096)
        try refused(BlockPack.encode([good, zeros]), 400, "record 1 ")
        try refused(BlockPack.encode([good, zeros]), 400, "zero")
        // Lengths out of range: 0, and one byte over a block.
        try refused(BlockPack.encode([good]) + SHA256Hasher.digest(good).bytes + [0, 0, 0, 0], 400, "record 1 ")
        let over = UInt32(Blocks.size + 1)
        try refused(SHA256Hasher.digest(good).bytes + [UInt8(over >> 24), UInt8(over >> 16 & 0xff), UInt8(over >> 8 & 0xff), UInt8(over & 0xff)] + good, 400, "record 0 ")
        try refused(BlockPack.encode([good]), 415, "vnd.vdrive.block-pack", headers: ["Content-Type: application/octet-stream"])
        let chunked = try s.raw.perform(method: "POST", url: s.process.base + API.blockPack,
                                        headers: ["Authorization: Bearer \(s.token)", "Content-Type: \(BlockPack.mediaType)", "Transfer-Encoding: chunked", "Expect:"],
                                        body: .bytes(BlockPack.encode([good])))
        #expect(chunked.status == 411, "\(chunked.status) \(chunked.text)")
        #expect(try !s.has(SHA256Hasher.digest(good)))
        #expect(s.staging.isEmpty)
        // An empty pack is a pack of no records.
        let empty = try s.sendPack([])
        #expect(empty.status == 200 && (try? WireJSON.decode(BlockPackResponse.self, from: empty.body)) == BlockPackResponse(stored: 0, present: 0))
    }

    @Test(arguments: Backend.allCases) func aPackOverTheQuotaIsRefusedWhole(_ backend: Backend) throws {
        let s = try PackServer(backend, extra: ["--quota", "1M"]); defer { s.remove() }
        let blocks = (0..<3).map { randomBytes(400_000, seed: 16 + UInt64($0)) }
        let reply = try s.sendPack(BlockPack.encode(blocks))
        #expect(reply.status == 507 && reply.error?.error == "quota_exceeded", "\(reply.status) \(reply.text)")
        for b in blocks { #expect(try !s.has(SHA256Hasher.digest(b))) }
        let fits = try s.sendPack(BlockPack.encode(Array(blocks[0..<2])))
        #expect(fits.status == 200, "\(fits.status) \(fits.text)")
    }

    @Test(arguments: Backend.allCases) func fetchingAMissingBlockIs404BeforeAnyByte(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        let files = BlockFiles(in: s.dir.path, count: 2, seed: 17); defer { files.close() }
        try s.client.sendBlockPack(files.list)
        let missing = SHA256Hasher.digest("never stored")
        let reply = try s.fetch(#"{"hashes": ["\#(files.digests[0].hex)", "\#(missing.hex)", "\#(files.digests[1].hex)"]}"#)
        #expect(reply.status == 404 && reply.error?.field == "hashes.1" && reply.text.contains(missing.hex), "\(reply.status) \(reply.text)")
        var handed = 0
        #expect(throws: ClientError.notFound) { try s.client.fetchBlockPack([files.digests[0], missing]) { _, _ in handed += 1 } }
        #expect(handed == 0, "a block was handed on from a fetch refused whole")
        // Zero blocks are never stored, so never fetched.
        let zero = Blocks.zeroDigest(length: 4096)
        #expect(try s.fetch(#"{"hashes": ["\#(zero.hex)"]}"#).status == 404)
        // The request's own bounds.
        let tooMany = try s.fetch(String(decoding: WireJSON.encode(BlockPackRequest(hashes: Array(repeating: files.digests[0].hex, count: API.maxPackHashes + 1))), as: UTF8.self))
        #expect(tooMany.status == 413 && tooMany.text.contains("fewer"), "\(tooMany.status) \(tooMany.text)")
        let notAHash = try s.fetch(#"{"hashes": ["\#(files.digests[0].hex)", "xyz"]}"#)
        #expect(notAHash.status == 400 && notAHash.error?.field == "hashes.1")
        let unknownField = try s.fetch(#"{"hashes": [], "extra": 1}"#)
        #expect(unknownField.status == 400 && unknownField.error?.field == "extra")
        let none = try s.fetch(#"{"hashes": []}"#)
        #expect(none.status == 200 && none.body.isEmpty)
    }

    @Test(arguments: Backend.allCases) func blocksSentInAPackArePresentForFilesAndTheTree(_ backend: Backend) throws {
        let s = try PackServer(backend); defer { s.remove() }
        // A one-block file and a two-block file (4 MiB and 1,000 bytes), cut into block files.
        let small = TestFile(in: s.dir.path, size: 70_000, seed: 18)
        let large = TestFile(in: s.dir.path, size: Blocks.size + 1000, seed: 19)
        let pieces = [Array(small.bytes), Array(large.bytes[0..<Blocks.size]), Array(large.bytes[Blocks.size...])]
        let fds = pieces.enumerated().map { i, b -> Int32 in
            writeFile("\(s.dir.path)/piece-\(i)", b)
            return open("\(s.dir.path)/piece-\(i)", O_RDONLY)
        }
        defer { fds.forEach { close($0) } }
        let sent = try s.client.sendBlockPack(pieces.enumerated().map { (SHA256Hasher.digest($1), fds[$0], $1.count) })
        #expect(sent == (stored: 3, present: 0))

        // The plan lists nothing to send; recording the file needs no upload.
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: large.content, size: large.size, blocks: large.manifest.blocks) else {
            Issue.record("a content whose blocks are all present but never recorded is not 'present' yet, it is a plan of no blocks"); return
        }
        #expect(tickets.isEmpty)
        let record = try s.client.recordFile(FileRecord(path: "Docs/large.bin", hash: large.content.hex, size: large.size, blocks: large.manifest.blocks.map(\.hex),
                                                        captureDate: nil, mtime: 1, deviceSequence: 1))
        #expect(record.sequence != nil)
        let results = try s.client.applyTreeChanges([.put(TreePut(id: Hex.encode((0..<16).map { _ in UInt8.random(in: 0...255) }), base: 0, parent: TreeNode.rootID,
                                                                  name: "small.bin", kind: .file, hash: small.content.hex, size: small.size,
                                                                  blocks: small.manifest.blocks.map(\.hex), mtime: 1))])
        #expect(results.first?.node != nil, "the tree put was refused: \(results)")
        // And the contents read back whole.
        let null = open("/dev/null", O_WRONLY)
        defer { close(null) }
        #expect(try s.client.download(content: large.content, to: null) == large.size)
        #expect(try s.client.download(content: small.content, to: null) == small.size)
    }
}

/// The pack codec alone: seeded random records encoded, then decoded from pieces of
/// random sizes, give back the same records; every cut inside a record is `.truncated`
/// naming it, a length out of range `.badLength` naming it.
@Suite(.tags(.logic)) struct BlockPackCodecTests {
    @Test func randomRecordsRoundTripInPiecesOfAnySize() throws {
        let seed = testSeed()
        print("BlockPackCodecTests seed \(seed)")
        var rng = SeededGenerator(seed: seed)
        for round in 0..<20 {
            let count = Int.random(in: 0...40, using: &rng)
            let blocks = (0..<count).map { i -> [UInt8] in
                let length = Int.random(in: 0..<10, using: &rng) == 0 ? Int.random(in: 1...Blocks.size, using: &rng) : Int.random(in: 1...300, using: &rng)
                return randomBytes(length, seed: seed &+ UInt64(round * 100 + i))
            }
            let pack = BlockPack.encode(blocks)
            #expect(pack.count == blocks.reduce(0) { $0 + BlockPack.recordSize(length: $1.count) })

            // Written out piece by piece, as a body being sent is: the same bytes.
            var encoder = BlockPackEncoder(blocks.map { (SHA256Hasher.digest($0), $0.count) })
            #expect(encoder.length == Int64(pack.count))
            var streamed: [UInt8] = []
            while true {
                let room = Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 1...50, using: &rng) : Int.random(in: 1...300_000, using: &rng)
                var piece = [UInt8](repeating: 0, count: room)
                let n = try #require(piece.withUnsafeMutableBytes { buffer in
                    encoder.fill(buffer) { record, offset, into in
                        // A reader may give fewer bytes than asked.
                        let n = min(into.count, Int.random(in: 1...70_000, using: &rng))
                        blocks[record].withUnsafeBytes { into.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[offset..<offset + n])) }
                        return n
                    }
                })
                if n == 0 { break }
                streamed += piece[0..<n]
            }
            #expect(streamed == pack, "seed \(seed), round \(round)")
            #expect(encoder.position == encoder.length)

            var decoder = BlockPackDecoder()
            var got: [(SHA256Digest, [UInt8])] = []
            var at = 0
            while at < pack.count {
                let n = min(pack.count - at, Int.random(in: 0..<4, using: &rng) == 0 ? Int.random(in: 1...40, using: &rng) : Int.random(in: 1...200_000, using: &rng))
                try pack[at..<at + n].withUnsafeBytes { piece in
                    try decoder.feed(piece) { part in
                        switch part {
                        case .header(let record, let digest, let length):
                            #expect(record == got.count && length >= 1)
                            got.append((digest, []))
                        case .bytes(let bytes): got[got.count - 1].1 += bytes
                        case .end(let record): #expect(record == got.count - 1)
                        }
                    }
                }
                at += n
            }
            try decoder.finish()
            #expect(decoder.atRecordBoundary)
            #expect(got.map(\.1) == blocks, "seed \(seed), round \(round)")
            #expect(got.map(\.0) == blocks.map(SHA256Hasher.digest), "seed \(seed), round \(round)")

            // Cut anywhere inside a record: truncated, naming that record.
            guard !blocks.isEmpty else { continue }
            let cut = Int.random(in: 1..<pack.count, using: &rng)
            var starts = [0]
            for b in blocks { starts.append(starts.last! + BlockPack.recordSize(length: b.count)) }
            var cutDecoder = BlockPackDecoder()
            try pack[0..<cut].withUnsafeBytes { try cutDecoder.feed($0) { _ in } }
            let inside = starts.lastIndex { $0 <= cut }!
            if starts[inside] == cut {
                try cutDecoder.finish()
            } else {
                #expect(throws: BlockPackError.self) { try cutDecoder.finish() }
                do { try cutDecoder.finish() } catch { if case .truncated(let record, _) = error { #expect(record == inside, "seed \(seed): cut at \(cut)") } }
            }
        }
    }

    @Test func aBlockThatCannotBeReadEndsTheEncodedPack() throws {
        var encoder = BlockPackEncoder([(SHA256Hasher.digest([1, 2]), 2), (SHA256Hasher.digest([3]), 1)])
        var buffer = [UInt8](repeating: 0, count: 100)
        let first = buffer.withUnsafeMutableBytes { b in encoder.fill(b) { record, _, into in record == 0 ? { into[0] = 1; into[1] = 2; return 2 }() : nil } }
        #expect(first == BlockPack.recordSize(length: 2) + BlockPack.headerSize, "the bytes before the failure are given")
        let second = buffer.withUnsafeMutableBytes { b in encoder.fill(b) { _, _, _ in nil } }
        #expect(second == nil, "then the failure")
    }

    @Test func lengthsOutOfRangeAreRefusedNamingTheRecord() throws {
        let good = BlockPack.encode([[1, 2, 3]])
        for length in [UInt32(0), UInt32(Blocks.size + 1), UInt32.max] {
            let bad = good + [UInt8](repeating: 9, count: 32) + [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
            var decoder = BlockPackDecoder()
            #expect(throws: BlockPackError.badLength(record: 1, length: length)) {
                try bad.withUnsafeBytes { try decoder.feed($0) { _ in } }
            }
        }
    }
}
