import Client
import Crypto
import Foundation
import ObjectStore
import Protocol
import Server
import Storage
import Testing

/// A server keeping its blocks in a real SeaweedFS (`--store s3://…`): devices PUT
/// blocks straight to the store with presigned URLs, the server verifies each before it
/// is offered for dedup, and any server process can answer any request.
@Suite(.tags(.endToEnd), .serialized) struct ScaledStoreTests {
    /// A fresh SeaweedFS, and the server's view of it (its store choice and an S3 client
    /// with the same credentials, to look at the bucket as an operator would).
    final class Store {
        let dir = TemporaryDirectory("vdrive-scaled")
        let weed: SeaweedFS
        let choice: BlockStoreChoice
        let s3: S3Store
        init() throws {
            weed = try SeaweedFS(folder: dir.path + "/seaweed")
            let location = try S3Location.parse(weed.storeURL)
            let credentials = S3Credentials(accessKey: weed.accessKey, secretKey: weed.secretKey)
            choice = .s3(location, credentials)
            s3 = S3Store(location: location, credentials: credentials)
        }
        func stop() { weed.stop(); dir.remove() }
        func object(_ d: SHA256Digest) throws -> Int64? { try s3.head("blocks/" + d.hex) }

        /// A fresh database of the shared PostgreSQL cluster and the `vdrive serve` options
        /// naming it and this store (credentials from a file named in the store URL).
        func scaledBackends() throws -> (database: String, options: [String]) {
            guard let cluster = PostgresCluster.shared else { throw TestFailure("no PostgreSQL cluster") }
            let database = try cluster.newDatabase()
            return (database, ["--database", database, "--store", try weed.storeURL(credentialsIn: dir.path + "/credentials")])
        }
    }

    /// The plan of `f` (every block of a new content).
    static func plan(_ client: WorkspaceClient, _ f: TestFile) throws -> [BlockTicket] {
        guard case .blocks(let tickets, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected blocks to upload")
        }
        return tickets
    }

    @Test func planIsPresignedPutsAndNothingUnverifiedBecomesABlock() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: 3 * Blocks.size + 1000, seed: 5)
        let tickets = try Self.plan(server.client, f)
        try #require(tickets.count == 4)
        for t in tickets {
            guard case .s3(let headers) = t.kind else { Issue.record("block \(t.index) is not an S3 PUT"); continue }
            #expect(t.offset == 0)
            #expect(t.url.hasPrefix(store.weed.endpoint + "/" + store.weed.bucket + "/blocks/" + t.hash.hex + "?"))
            #expect(t.url.contains("X-Amz-SignedHeaders=content-length%3Bhost%3Bx-amz-checksum-sha256"))
            #expect(headers == ["x-amz-checksum-sha256: " + Base64.encode(t.hash.bytes)])
        }
        // Nothing is kept for the plan: no upload row, no staging file.
        let tusCreation = try server.send("POST", "/v1/tus", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: \(tickets[0].length)",
                                                                       "Upload-Metadata: sha256 " + Base64.encode(Array(tickets[0].hash.hex.utf8))])
        #expect(tusCreation.status == 404, "no tus uploads on a scaled server: \(tusCreation.text)")

        // Block 0 PUT to the store but not verified: not a block yet (no dedup for anyone).
        let fd = f.open(); defer { close(fd) }
        let put0 = try server.raw.perform(method: "PUT", url: tickets[0].url, headers: Self.headers(tickets[0]),
                                          body: .file(fd: fd, offset: 0, length: tickets[0].length))
        #expect(put0.status == 200)
        #expect(try store.object(tickets[0].hash) == tickets[0].length)
        #expect(try !server.hasBlock(tickets[0].hash))
        #expect(try Self.plan(server.client, f).count == 4, "an unverified object is still missing in the plan")
        // Verified: present, and the plan no longer lists it.
        try server.client.verifyBlock(tickets[0].hash)
        #expect(try server.hasBlock(tickets[0].hash))
        #expect(try Self.plan(server.client, f).map(\.index) == [1, 2, 3])
        // Verifying a block nobody PUT: 404, nothing recorded.
        #expect(throws: ClientError.notFound) { try server.client.verifyBlock(tickets[1].hash) }

        // The rest by the typed client; then record and read back (downloads redirect to the store).
        try server.client.uploadFile(fd: fd, size: f.size)
        try server.record(f, at: "big.bin")
        let out = server.dir.path + "/out"
        let outFD = Glibc.open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(outFD) }
        try server.client.download(content: f.content, to: outFD)
        #expect(Array(FileManager.default.contents(atPath: out)!) == f.bytes)
        let redirect = try server.send("GET", "/v1/blocks/\(tickets[2].hash.hex)")
        #expect(redirect.status == 307)
        #expect(redirect.header("Location")?.hasPrefix(store.weed.endpoint) == true)
        let ranged = try server.raw.perform(method: "GET", url: redirect.header("Location")!, headers: ["Range: bytes=100-199"])
        #expect(ranged.status == 206)
        #expect(ranged.body == Array(f.bytes[(2 * Blocks.size + 100)...(2 * Blocks.size + 199)]))
        // The bearer token never goes to the store: the client follows without it (a whole block, checked).
        let blockFD = Glibc.open(server.dir.path + "/block", O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(blockFD) }
        #expect(try server.client.downloadBlock(tickets[3].hash, to: blockFD) == 1000)

        // A whole block PUT through the server (scripts, curl -T): checked, then stored in the bucket.
        let g = TestFile(in: server.dir.path, size: 70_000, seed: 6)
        var wrong = g.bytes
        wrong[0] ^= 1
        #expect(try server.send("PUT", "/v1/blocks/\(g.digest.hex)", headers: ["Expect:"], body: .bytes(wrong)).status == 460)
        #expect(try store.object(g.digest) == nil)
        #expect(try server.send("PUT", "/v1/blocks/\(g.digest.hex)", headers: ["Expect:"], body: .bytes(g.bytes)).status == 201)
        #expect(try store.object(g.digest) == 70_000)
        #expect(try server.hasBlock(g.digest))
    }

    /// The error a client call threw, nil when it succeeded.
    static func outcome(_ body: () throws(ClientError) -> Void) -> ClientError? {
        do { try body(); return nil } catch { return error }
    }

    static func headers(_ t: BlockTicket) -> [String] {
        guard case .s3(let headers) = t.kind else { return [] }
        return headers + ["Expect:"]
    }

    @Test func aDeviceLyingAboutAHashNeverMakesItPresent() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: 1_000_000, seed: 9)
        let ticket = try #require(try Self.plan(server.client, f).first)
        var other = f.bytes
        other[500] ^= 0x55
        // Other bytes on the presigned URL: the store checks the signed x-amz-checksum-sha256.
        let lied = try server.raw.perform(method: "PUT", url: ticket.url, headers: Self.headers(ticket), body: .bytes(other))
        #expect(lied.status == 400)
        #expect(try store.object(ticket.hash) == nil)
        // Another checksum header for the other bytes: not what was signed.
        let resigned = try server.raw.perform(method: "PUT", url: ticket.url,
                                              headers: ["x-amz-checksum-sha256: " + Base64.encode(SHA256Hasher.digest(other).bytes), "Expect:"],
                                              body: .bytes(other))
        #expect(resigned.status == 403)
        // A store that let other bytes in under the name anyway (SeaweedFS does for a
        // header-signed PUT whose payload hash lies): the server's verification refuses,
        // deletes the object, and the hash never becomes present.
        try other.withUnsafeBytes { try store.s3.put("blocks/" + ticket.hash.hex, bytes: $0, sha256: ticket.hash) }
        #expect(try store.object(ticket.hash) == Int64(other.count))
        #expect(throws: ClientError.self) { try server.client.verifyBlock(ticket.hash) }
        let reply = try server.send("POST", "/v1/blocks/\(ticket.hash.hex)/verify", headers: ["Expect:"], body: .bytes([]))
        #expect(reply.status == 404, "deleted by the first verification")
        #expect(try store.object(ticket.hash) == nil)
        #expect(try !server.hasBlock(ticket.hash))
        #expect(try Self.plan(server.client, f).map(\.hash) == [ticket.hash])
        #expect(throws: ClientError.self) { try server.record(f, at: "lie.bin") }
        #expect(try server.client.presentContents([f.content]).isEmpty)
        // The mismatch answer names the code the device acts on (start over).
        try other.withUnsafeBytes { try store.s3.put("blocks/" + ticket.hash.hex, bytes: $0, sha256: ticket.hash) }
        let mismatch = try server.send("POST", "/v1/blocks/\(ticket.hash.hex)/verify", headers: ["Expect:"], body: .bytes([]))
        #expect(mismatch.status == 460)
        #expect(mismatch.error?.error == "block_checksum_mismatch")
    }

    @Test func chunkListsAreComputedFromTheObjectInTheStore() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: Blocks.size + 300_000, seed: 53)
        try server.store(f, at: "clip.mov")
        func expected(_ i: Int) -> [SHA256Digest] {
            let bytes = f.bytes[(i * Blocks.size)..<min(f.bytes.count, (i + 1) * Blocks.size)]
            return stride(from: bytes.startIndex, to: bytes.endIndex, by: Blocks.chunkSize).map {
                SHA256Hasher.digest(Array(bytes[$0..<min(bytes.endIndex, $0 + Blocks.chunkSize)]))
            }
        }
        // Not made by the verification read (a second hash of every byte uploaded): on first request.
        let db = try Database(path: server.server.configuration.dataDirectory + "/server.db")
        #expect(try db.queryOne("SELECT count(*) FROM block_chunks") { $0.int(0) } == 0)
        for (i, block) in f.manifest.blocks.enumerated() { #expect(try server.client.chunkDigests(block) == expected(i)) }
        #expect(try db.queryOne("SELECT count(*) FROM block_chunks") { $0.int(0) } == 2)
        // Kept: with the object gone, the list still comes from the records.
        try store.s3.delete("blocks/" + f.manifest.blocks[1].hex)
        #expect(try server.client.chunkDigests(f.manifest.blocks[1]) == expected(1))
    }

    /// When a presigned URL stops being valid: its X-Amz-Date plus X-Amz-Expires seconds.
    static func presignedExpiry(_ url: String) -> Date? {
        guard let query = URLComponents(string: url)?.queryItems,
              let signed = query.first(where: { $0.name == "X-Amz-Date" })?.value,
              let seconds = query.first(where: { $0.name == "X-Amz-Expires" })?.value.flatMap(Double.init) else { return nil }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "UTC")
        format.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        return format.date(from: signed).map { $0.addingTimeInterval(seconds) }
    }

    @Test func expiredAlteredAndForgedURLsAreRefusedByTheStoreAndRenewed() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(uploadExpiry: 2, store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: 2 * Blocks.size, seed: 13)
        let tickets = try Self.plan(server.client, f)
        let fd = f.open(); defer { close(fd) }
        let t = tickets[0]
        func put(_ url: String) throws -> Int {
            try server.raw.perform(method: "PUT", url: url, headers: Self.headers(t), body: .file(fd: fd, offset: 0, length: t.length)).status
        }
        #expect(try put(t.url.replacingOccurrences(of: "X-Amz-Expires=2", with: "X-Amz-Expires=600")) == 403, "altered expiry")
        #expect(try put(t.url.replacingOccurrences(of: t.hash.hex, with: tickets[1].hash.hex)) == 403, "altered key")
        let signature = t.url.components(separatedBy: "X-Amz-Signature=")[1]
        #expect(try put(t.url.replacingOccurrences(of: signature, with: String(signature.reversed()))) == 403, "forged signature")
        // Expired by the URL's own terms: past X-Amz-Date + X-Amz-Expires, by the clock the
        // store reads too (whole seconds: one more makes "past" sure).
        let expires = try #require(Self.presignedExpiry(t.url), "no X-Amz-Date/X-Amz-Expires in \(t.url)")
        try eventually("the presigned URL's expiry (\(expires)) passes", within: 30, poll: 0.1) {
            Date().timeIntervalSince1970 >= expires.timeIntervalSince1970 + 1
        }
        #expect(try put(t.url) == 403, "expired")
        #expect(throws: ClientError.expired) { try server.client.uploadBlock(t, fd: fd) }
        #expect(try store.object(t.hash) == nil)
        // The device asks for a new plan and finishes.
        try server.client.uploadFile(fd: fd, size: f.size)
        try server.record(f, at: "renewed.bin")
    }

    @Test func theStoreRestartedMidUploadAndTheDeviceFinishesAfter() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: 6 * Blocks.size, seed: 21)
        let fd = f.open(); defer { close(fd) }
        var restarted = false
        var attempts = 0
        var plans: [[Int]] = []
        while true {
            attempts += 1
            plans.append(try Self.plan(server.client, f).map(\.index))
            let failure: ClientError? = Self.outcome { () throws(ClientError) in
                try server.client.uploadFile(fd: fd, size: f.size) { offset in
                    // Mid-PUT of block 2: kill the store and start it again under the transfer.
                    if !restarted && offset > 2 * Int64(Blocks.size) + 1_000_000 {
                        restarted = true
                        try? store.weed.restart()
                    }
                    return true
                }
            }
            guard let failure else { break }
            guard failure.isTransient && attempts < 5 else { throw failure }
        }
        #expect(restarted)
        #expect(plans.first == [0, 1, 2, 3, 4, 5])
        // Either libcurl sent block 2 again itself on a new connection (the kept one died
        // before its answer: the body is rewound) and the first plan finished, or the PUT
        // failed and the next plan names only block 2 and the unsent ones.
        #expect(plans.count == 1 || (plans.count == 2 && plans[1] == [2, 3, 4, 5]),
                "after the restart only block 2 (cut mid-PUT) and the unsent ones are planned: \(plans)")
        try server.record(f, at: "after-restart.bin")
        let out = server.dir.path + "/out"
        let outFD = Glibc.open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(outFD) }
        try server.client.download(content: f.content, to: outFD)
        #expect(Array(FileManager.default.contents(atPath: out)!) == f.bytes)
    }

    /// Every call by which a device reads back, on a scaled server, where every block
    /// read is a 307 to the store: the block list, chunk lists, ranges of blocks (the
    /// drive's partial reads), whole blocks (the drive's sequential reads and prefetch,
    /// restore), ranges of whole downloads, and files; each byte-equal to what went up.
    @Test func everyReadOfADeviceComesBackThroughTheStore() throws {
        let store = try Store(); defer { store.stop() }
        let server = try TestServer(store: store.choice); defer { server.stop() }
        let f = TestFile(in: server.dir.path, size: Blocks.size + 300_000, seed: 57)
        try server.store(f, at: "clip.mov")
        let client = server.client
        #expect(try client.contentBlocks(f.content) == f.manifest)
        let out = Glibc.open(server.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(out) }
        func written(_ count: Int) -> [UInt8] {
            var bytes = [UInt8](repeating: 0, count: count)
            return pread(out, &bytes, count, 0) == count ? bytes : []
        }
        for (i, block) in f.manifest.blocks.enumerated() {
            let bytes = Array(f.bytes[(i * Blocks.size)..<min(f.bytes.count, (i + 1) * Blocks.size)])
            for (c, digest) in try client.chunkDigests(block).enumerated() {
                let start = c * Blocks.chunkSize, length = min(Blocks.chunkSize, bytes.count - start)
                let chunk = try client.blockBytes(block, offset: start, length: length)
                #expect(chunk == Array(bytes[start..<(start + length)]), "chunk \(c) of block \(i)")
                #expect(SHA256Hasher.digest(chunk) == digest)
            }
            var streamed: [UInt8] = []
            #expect(try client.streamBlock(block, to: nil) { streamed += $0 } == Int64(bytes.count))
            #expect(streamed == bytes, "block \(i) streamed whole")
            #expect(try client.downloadBlock(block, to: out) == Int64(bytes.count))
            #expect(written(bytes.count) == bytes, "block \(i) downloaded whole")
            #expect(try client.downloadBlock(block, range: 1000...1999, to: out) == 1000)
            #expect(written(1000) == Array(bytes[1000...1999]), "a range of block \(i)")
        }
        let across = Int64(Blocks.size) - 500...Int64(Blocks.size) + 499
        #expect(try client.download(content: f.content, range: across, to: out) == 1000)
        #expect(written(1000) == Array(f.bytes[Int(across.lowerBound)...Int(across.upperBound)]))
        #expect(try client.download(content: f.content, to: out) == f.size)
        #expect(written(Int(f.size)) == f.bytes)
    }

    @Test func aServerWhoseStoreRefusesItsKeyDoesNotStart() throws {
        let store = try Store(); defer { store.stop() }
        let dir = store.dir.path
        try "aws_access_key_id = \(store.weed.accessKey)\naws_secret_access_key = wrong\n".write(toFile: dir + "/wrong", atomically: true, encoding: .utf8)
        let (status, _, stderr) = try run(vdriveBinary(), ["serve", "--data", dir + "/data", "--listen", "127.0.0.1:0",
                                                           "--store", store.weed.storeURL + "&credentials=" + dir + "/wrong"])
        #expect(status == 69)
        #expect(stderr.contains("s3://\(store.weed.bucket)") && stderr.contains("403"), "\(stderr)")
        let (missing, _, missingText) = try run(vdriveBinary(), ["serve", "--data", dir + "/data", "--store", store.weed.storeURL + "&credentials=" + dir + "/nothing"])
        #expect(missing == 78)
        #expect(missingText.contains(dir + "/nothing"))
    }

    /// The scaled setup itself: two processes, each with a data folder of its own (no
    /// local state shared), one PostgreSQL database for the records, one bucket.
    @Test(.enabled(if: PostgresCluster.isInstalled))
    func twoServerProcessesServeOneDeviceAndSurviveAKill() throws {
        let store = try Store(); defer { store.stop() }
        let dir = store.dir.path
        let (database, backends) = try store.scaledBackends()
        let token = try DeviceRegistry(dataDirectory: dir + "/data-a", database: .postgres(connectionString: database)).add("phone")
        let a = try ServerProcess(data: dir + "/data-a", extra: backends); defer { a.kill() }
        let b = try ServerProcess(data: dir + "/data-b", extra: backends); defer { b.kill() }
        let viaA = WorkspaceClient(baseURL: a.base, token: token), viaB = WorkspaceClient(baseURL: b.base, token: token)
        let f = TestFile(in: dir, size: 8 * Blocks.size - 5, seed: 31)
        let fd = f.open(); defer { close(fd) }

        // Alternating: plan from A, PUTs to the store, each verification by the other server.
        let tickets = try Self.plan(viaA, f)
        try #require(tickets.count == 8)
        for t in tickets.prefix(5) {
            guard case .s3(let headers) = t.kind else { throw TestFailure("not an S3 plan") }
            let put = try HTTPConnection().perform(method: "PUT", url: t.url, headers: headers + ["Expect:"], body: .file(fd: fd, offset: t.fileOffset, length: t.length))
            #expect(put.status == 200)
            try (t.index % 2 == 0 ? viaB : viaA).verifyBlock(t.hash)
        }
        // Block 5 PUT, then A is killed before its verification: the device goes to B.
        let t5 = tickets[5]
        guard case .s3(let headers5) = t5.kind else { throw TestFailure("not an S3 plan") }
        #expect(try HTTPConnection().perform(method: "PUT", url: t5.url, headers: headers5 + ["Expect:"], body: .file(fd: fd, offset: t5.fileOffset, length: t5.length)).status == 200)
        a.kill()
        #expect(throws: ClientError.self) { try viaA.verifyBlock(t5.hash) }
        // B plans only what no server verified: block 5 (PUT, unverified) and the unsent 6 and 7.
        #expect(try Self.plan(viaB, f).map(\.index) == [5, 6, 7])
        try viaB.uploadFile(fd: fd, size: f.size)
        #expect(try Self.plan(viaB, f).isEmpty)
        try viaB.recordFile(FileRecord(path: "video.mov", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                       captureDate: nil, mtime: 1, deviceSequence: 1))
        let out = dir + "/out"
        let outFD = Glibc.open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(outFD) }
        try viaB.download(content: f.content, to: outFD)
        #expect(Array(FileManager.default.contents(atPath: out)!) == f.bytes)
    }
}
