import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// What one client can make the server hold is bounded: open uploads (a hasher thread
/// and a file each), uploads one request or one device may start, and bytes of bodies
/// held in memory over all connections.
@Suite(.tags(.endToEnd)) struct LimitsTests {
    /// Descriptors of this process open on tus staging files (the in-process server's).
    static func openStagingFiles() -> Int {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return fds.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "").contains("/tus-") }.count
    }

    @Test(arguments: Records.all) func openUploadsAreBoundedAndReopenedOnDemand(_ records: Records) throws {
        var limits = ServerLimits()
        limits.openUploads = 3
        let s = try TestServer(records: records, limits: limits); defer { s.stop() }
        let files = (0..<8).map { TestFile(in: s.dir.path, size: 300_000, seed: 60 + UInt64($0)) }
        let tickets = try files.map { try s.ticket($0) }
        for (f, t) in zip(files, tickets) {
            #expect(try s.patch(t.url, offset: 0, bytes: Array(f.bytes[0..<100_000])).status == 204)
        }
        try eventually("at most 3 staging files open, the limit (\(Self.openStagingFiles()) are)", within: 10) { Self.openStagingFiles() <= 3 }
        // Every upload finishes, and each block is the one its hash names (hashers re-opened, or the commit read the file).
        for (f, t) in zip(files, tickets) {
            #expect(try s.patch(t.url, offset: 100_000, bytes: Array(f.bytes[100_000...])).status == 204)
            #expect(try s.hasBlock(f.digest))
        }
        try eventually("no staging file open (\(Self.openStagingFiles()) are)", within: 10) { Self.openStagingFiles() == 0 }
    }

    @Test(arguments: Records.all) func oneRequestAndOneDeviceStartBoundedUploads(_ records: Records) throws {
        var limits = ServerLimits()
        limits.uploadsPerRequest = 2
        limits.uploadsPerDevice = 3
        let s = try TestServer(records: records, limits: limits); defer { s.stop() }
        let big = TestFile(in: s.dir.path, size: 2 * Blocks.size + 1, seed: 70)
        let tooMany = try s.json("POST", "/v1/uploads", "{\"content\":\"\(big.content.hex)\",\"size\":\(big.size),\"blocks\":[\(big.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ","))]}")
        #expect(tooMany.status == 413)
        #expect(tooMany.error?.error == "too_many_uploads")
        #expect(tooMany.error?.message.contains("at most 2") == true, "\(tooMany.text)")

        let first = TestFile(in: s.dir.path, size: Blocks.size + 1, seed: 71), second = TestFile(in: s.dir.path, size: Blocks.size + 1, seed: 72)
        guard case .blocks(let firstTickets, _) = try s.client.createUpload(content: first.content, size: first.size, blocks: first.manifest.blocks) else {
            throw TestFailure("expected blocks")
        }
        #expect(firstTickets.count == 2)
        let overCap = try s.json("POST", "/v1/uploads", "{\"content\":\"\(second.content.hex)\",\"size\":\(second.size),\"blocks\":[\(second.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ","))]}")
        #expect(overCap.status == 429)
        #expect(overCap.error?.error == "too_many_uploads")
        #expect(overCap.error?.message.contains("2 uploads in progress") == true, "\(overCap.text)")
        // Another device has its own count.
        let tablet = try RevocationTests.secondDevice(s)
        guard case .blocks(let tabletTickets, _) = try tablet.client.createUpload(content: second.content, size: second.size, blocks: second.manifest.blocks) else {
            throw TestFailure("expected blocks")
        }
        #expect(tabletTickets.count == 2)
        // Finished uploads no longer count.
        let fd = first.open(); defer { close(fd) }
        try s.client.uploadFile(fd: fd, size: first.size)
        let g = TestFile(in: s.dir.path, size: 5000, seed: 73)
        #expect(throws: Never.self) { try s.client.createUpload(content: g.content, size: g.size, blocks: g.manifest.blocks) }
    }

    @Test(arguments: Records.all) func bodiesHeldInMemoryShareOneBudget(_ records: Records) throws {
        var limits = ServerLimits()
        limits.bufferedBytes = 1 << 20
        let s = try TestServer(records: records, limits: limits); defer { s.stop() }
        let length = 700_000
        // One client holds 700 kB of the budget: its body is declared and never finished.
        let holder = try RawConnection(port: s.server.port)
        #expect(holder.send(Array("POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1:\(s.server.port)\r\n\(s.auth)\r\nContent-Type: application/json\r\nContent-Length: \(length)\r\n\r\n{".utf8)))
        let body = Array(repeating: UInt8(ascii: " "), count: length)
        if let early = holder.reply(timeout: 0.3) { Issue.record("the held request was answered: \(early.status)") }
        var refused: HTTPResult?
        try eventually("a record beyond the share is refused with 503", within: 10) {
            guard let r = try? s.send("POST", "/v1/files", headers: ["Content-Type: application/json", "Expect:"], body: .bytes(body)) else { return false }
            refused = r
            return r.status == 503
        }
        #expect(refused?.status == 503, "\(refused?.status ?? 0) \(refused?.text ?? "")")
        #expect(refused?.header("Retry-After") == "2")
        #expect(refused?.error?.message.contains("send this again") == true)
        // Small bodies still fit beside it.
        #expect(try s.send("GET", "/v1/watermark").status != 503)
        #expect(try s.json("POST", "/v1/contents/present", "{\"hashes\":[]}").status == 200)
        // The holder goes away: its share comes back.
        holder.close()
        try eventually("the share comes back: the bad record is answered 400", within: 10) {
            (try? s.send("POST", "/v1/files", headers: ["Content-Type: application/json", "Expect:"], body: .bytes(body)))?.status == 400
        }
    }
}
