import Client
import Crypto
import Foundation
import Protocol
@testable import Server
import Testing

/// Helpers for tus requests on presigned URLs.
extension TestServer {
    func patch(_ url: String, offset: Int64, bytes: [UInt8], checksum: [UInt8]? = nil, contentType: String = Tus.offsetContentType) throws -> HTTPResult {
        var headers = ["Tus-Resumable: 1.0.0", "Content-Type: \(contentType)", "Upload-Offset: \(offset)"]
        if let checksum { headers.append("Upload-Checksum: sha256 " + Base64.encode(checksum)) }
        return try send("PATCH", url, headers: headers, body: .bytes(bytes), auth: false)
    }

    func head(_ url: String) throws -> HTTPResult { try send("HEAD", url, headers: ["Tus-Resumable: 1.0.0"], auth: false) }
}

/// The tus machinery on one block (files of one block here; BlockTests has many).
@Suite(.tags(.endToEnd)) struct UploadTests {
    /// A device asks for an upload whose every byte the server has, while another request
    /// of it commits the block: the row it read says "not committed", but under the claim
    /// the upload is done. The late request answers from the row as it is then, instead of
    /// opening a staging file that is now a block in the store (a 500 before). Uploads by
    /// tus go to the server's folder, on either records' database (a store devices PUT to
    /// keeps no uploads); the block then reads back whole.
    @Test(arguments: Records.all) func anUploadCommittedSinceItsRowWasReadIsDone(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 100_000)
        let ticket = try s.ticket(f)
        #expect(try s.patch(ticket.url, offset: 0, bytes: f.bytes).status == 204)
        let context = s.server.router.context
        let id = try #require(try context.metadata.withSession { db in
            try db.queryOne("SELECT id FROM uploads WHERE hash = ?", f.digest.hex) { $0.string(0) } ?? nil
        })
        let done = try #require(try context.upload(id: id))
        try #require(done.completed)
        let readBefore = UploadRow(id: done.id, hash: done.hash, length: done.length, received: done.length, expiresAt: done.expiresAt, completed: false)
        let answered = try UploadHandlers.finishReceived(readBefore, digest: f.digest, context: context)
        #expect(answered.completed)
        #expect(try context.metadata.blockSize(f.digest.hex) == f.size, "the block is stored")
        let back = s.dir.path + "/back"
        let fd = open(back, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(fd); unlink(back) }
        #expect(try s.client.downloadBlock(f.digest, to: fd) == f.size)
        #expect(FileManager.default.contents(atPath: back).map { Array($0) } == f.bytes)
    }

    @Test(arguments: Records.all) func createIsIdempotentAndReportsTheCurrentOffset(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 3 << 20)
        let first = try s.ticket(f)
        #expect(first.offset == 0)
        #expect(first.index == 0 && first.hash == f.digest && first.length == f.size)
        let bytes = f.bytes
        let r = try s.patch(first.url, offset: 0, bytes: Array(bytes[0..<(1 << 20)]))
        #expect(r.status == 204)
        #expect(r.header("Upload-Offset") == "\(1 << 20)")
        let second = try s.ticket(f)
        #expect(second.offset == 1 << 20)
        #expect(second.url.components(separatedBy: "?")[0] == first.url.components(separatedBy: "?")[0])
        // Same block, other size (the same block count, so the manifest checks): refused.
        let sized = try s.json("POST", "/v1/uploads", #"{"content":"\#(f.content.hex)","size":\#(f.size + 1),"blocks":["\#(f.digest.hex)"]}"#)
        #expect(sized.status == 409)
        #expect(sized.error?.error == "size_conflict")
        #expect(sized.error?.field == "blocks.0")
        let fd = f.open()
        defer { close(fd) }
        try s.client.uploadFile(fd: fd, size: f.size, chunkSize: 1 << 20)
        // Every block is there, but the content is present only once a file records it.
        guard case .blocks(let none, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("the content is not present before a file records it")
        }
        #expect(none.isEmpty)
        try s.record(f, at: "a")
        #expect(try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) == .present)
        #expect(s.blockCount() == 1)
    }

    @Test(arguments: Records.all) func tusOptionsHeadAndExpires(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let options = try s.send("OPTIONS", "/v1/tus", auth: false)
        #expect(options.status == 204)
        #expect(options.header("Tus-Version") == "1.0.0")
        #expect(options.header("Tus-Extension") == "creation,checksum,expiration,termination")
        #expect(options.header("Tus-Checksum-Algorithm") == "sha256")
        #expect(options.header("Tus-Max-Size") == "\(Blocks.size)")
        let f = TestFile(in: s.dir.path, size: 100)
        let t = try s.ticket(f)
        let head = try s.head(t.url)
        #expect(head.status == 200)
        #expect(head.header("Upload-Offset") == "0")
        #expect(head.header("Upload-Length") == "100")
        #expect(head.header("Upload-Expires")?.hasSuffix("GMT") == true)
        #expect(head.header("Cache-Control") == "no-store")
        #expect(head.header("Tus-Resumable") == "1.0.0")
    }

    @Test(arguments: Records.all) func tusCreationRefusesMoreThanABlock(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let big = try s.send("POST", "/v1/tus", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: \(Blocks.size + 1)",
                                                         "Upload-Metadata: sha256 " + Base64.encode(Array(SHA256Hasher.digest("x").hex.utf8))])
        #expect(big.status == 413)
        #expect(big.header("Tus-Max-Size") == "\(Blocks.size)")
        #expect(big.error?.field == "Upload-Length")
        let empty = try s.send("POST", "/v1/tus", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: 0",
                                                           "Upload-Metadata: sha256 " + Base64.encode(SHA256Hasher.digest([]).bytes)])
        #expect(empty.status == 400)
        let one = try s.send("POST", "/v1/tus", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: \(Blocks.size)",
                                                         "Upload-Metadata: sha256 " + Base64.encode(SHA256Hasher.digest("y").bytes)])
        #expect(one.status == 201)
        #expect(one.header("Location")?.contains("/v1/tus/") == true)
        // A zero block is never stored, so it is never uploaded either.
        let zeros = try s.send("POST", "/v1/tus", headers: ["Tus-Resumable: 1.0.0", "Upload-Length: \(Blocks.size)",
                                                           "Upload-Metadata: sha256 " + Base64.encode(Blocks.zeroDigest(length: Blocks.size).bytes)])
        #expect(zeros.status == 400)
        let put = try s.send("PUT", "/v1/blocks/\(Blocks.zeroDigest(length: 10).hex)", body: .bytes([UInt8](repeating: 0, count: 10)))
        #expect(put.status == 400)
    }

    @Test(arguments: Records.all) func tamperedOrExpiredURLIs403AndWritesNothing(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 1000)
        let t = try s.ticket(f)
        let tampered = t.url.replacingOccurrences(of: "size=1000", with: "size=999")
        let r = try s.patch(tampered, offset: 0, bytes: Array(f.bytes[0..<999]))
        #expect(r.status == 403)
        #expect(try s.client.uploadOffset(url: t.url) == 0)
        let noSig = String(t.url.prefix { $0 != "&" }) // drops size, expires, sig
        #expect(try s.head(noSig).status == 400)  // a required query argument is missing
        let badSig = t.url.replacingOccurrences(of: "sig=", with: "sig=0")
        #expect(try s.head(badSig).status == 403)  // a malformed signature is a refusal
        #expect(throws: ClientError.expired) { try s.client.uploadOffset(url: tampered) }

        let expiring = try TestServer(uploadExpiry: -10, records: records)
        defer { expiring.stop() }
        let e = try expiring.ticket(f)
        let er = try expiring.patch(e.url, offset: 0, bytes: f.bytes)
        #expect(er.status == 403)
        #expect(er.error?.message.contains("expired") == true)
        #expect(expiring.blockCount() == 0)
    }

    @Test(arguments: Records.all) func offsetMismatchIs409WithTheServersOffset(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 1000)
        let t = try s.ticket(f)
        let r = try s.patch(t.url, offset: 10, bytes: Array(f.bytes[10..<20]))
        #expect(r.status == 409)
        #expect(r.header("Upload-Offset") == "0")
        #expect(r.error?.field == "Upload-Offset")
        let fd = f.open()
        defer { close(fd) }
        #expect(throws: ClientError.offsetConflict(serverOffset: 0)) {
            try s.client.patch(url: t.url, offset: 500, fd: fd, fileOffset: 500, length: 500)
        }
    }

    @Test(arguments: Records.all) func bodyLongerThanDeclaredIs413(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 1000)
        let t = try s.ticket(f)
        let r = try s.patch(t.url, offset: 0, bytes: f.bytes + [1, 2, 3])
        #expect(r.status == 413)
        #expect(try s.client.uploadOffset(url: t.url) == 0)
        // Without Content-Length (chunked), the excess is detected while reading.
        let chunked = try s.send("PATCH", t.url, headers: ["Tus-Resumable: 1.0.0", "Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 0",
                                                           "Transfer-Encoding: chunked"], body: .bytes(f.bytes + [9]), auth: false)
        #expect(chunked.status == 413)
        #expect(try s.client.uploadOffset(url: t.url) == 0)
    }

    @Test(arguments: Records.all) func wrongContentTypeIs415(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 10)
        let t = try s.ticket(f)
        #expect(try s.patch(t.url, offset: 0, bytes: f.bytes, contentType: "application/octet-stream").status == 415)
    }

    @Test(arguments: Records.all) func chunkChecksumMismatchIs460AndDiscardsTheChunk(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 2000)
        let t = try s.ticket(f)
        let bytes = f.bytes
        let first = Array(bytes[0..<1000])
        let ok = try s.patch(t.url, offset: 0, bytes: first, checksum: SHA256Hasher.digest(first).bytes)
        #expect(ok.status == 204)
        let second = Array(bytes[1000...])
        var damaged = second
        damaged[5] ^= 0xff
        let bad = try s.patch(t.url, offset: 1000, bytes: damaged, checksum: SHA256Hasher.digest(second).bytes)
        #expect(bad.status == 460)
        #expect(bad.error?.error == "checksum_mismatch")
        #expect(try s.client.uploadOffset(url: t.url) == 1000)
        let sha1 = try s.send("PATCH", t.url, headers: ["Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 1000", "Upload-Checksum: sha1 AAAA"], body: .bytes(second), auth: false)
        #expect(sha1.status == 400)
        let good = try s.patch(t.url, offset: 1000, bytes: second, checksum: SHA256Hasher.digest(second).bytes)
        #expect(good.status == 204)
        #expect(try s.hasBlock(f.digest))
    }

    /// A block whose bytes are not its hash is refused at its last byte: nothing is
    /// stored and the upload starts again at 0.
    @Test(arguments: Records.all) func wrongBlockIsRejectedAtItsLastByte(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 5000)
        let liar = SHA256Hasher.digest("something else")
        let content = ContentHash.of(blocks: [liar])
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: content, size: f.size, blocks: [liar]), let t = tickets.first else {
            throw TestFailure("expected a block to upload")
        }
        let bytes = f.bytes
        #expect(try s.patch(t.url, offset: 0, bytes: Array(bytes[0..<4000])).status == 204)
        let last = try s.patch(t.url, offset: 4000, bytes: Array(bytes[4000...]))
        #expect(last.status == 460)
        #expect(last.error?.error == "block_checksum_mismatch")
        #expect(s.blockCount() == 0)
        #expect(try s.client.uploadOffset(url: t.url) == 0)
        #expect(try !s.hasBlock(liar))
        let fd = f.open()
        defer { close(fd) }
        #expect(throws: ClientError.self) { try s.client.uploadBlock(t, fd: fd) }
        // Nothing is visible: recording the file is refused, the block still missing.
        #expect(throws: ClientError.missingBlocks([liar])) {
            try s.client.recordFile(FileRecord(path: "x", hash: content.hex, size: f.size, blocks: [liar.hex], captureDate: nil, mtime: 1, deviceSequence: 1))
        }
        #expect(try s.client.presentContents([content]).isEmpty)
    }

    @Test(arguments: Records.all) func terminationRemovesTheUploadThen404(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 4000)
        let t = try s.ticket(f)
        #expect(try s.patch(t.url, offset: 0, bytes: Array(f.bytes[0..<100])).status == 204)
        try s.client.terminate(url: t.url)
        #expect(try s.head(t.url).status == 404)
        #expect(throws: ClientError.notFound) { try s.client.uploadOffset(url: t.url) }
        #expect(try s.patch(t.url, offset: 0, bytes: Array(f.bytes[0..<100])).status == 404)
        let again = try s.ticket(f)
        #expect(again.offset == 0)
        #expect(again.url != t.url)
    }

    @Test(arguments: Records.all) func disconnectMidPatchKeepsTheBytesReceived(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: Blocks.size)
        let t = try s.ticket(f)
        let fd = f.open()
        defer { close(fd) }
        var sent: Int64 = 0
        // No Upload-Checksum: bytes received before the disconnect count. The progress
        // callback slows the sender once 1 MiB is out, so the cut lands mid-block.
        #expect(throws: ClientError.cancelled) {
            _ = try s.raw.perform(method: "PATCH", url: t.url, headers: ["Tus-Resumable: 1.0.0", "Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 0"],
                                  body: .file(fd: fd, offset: 0, length: f.size), progress: { n in
                                      sent = n
                                      if n >= 1 << 20 { usleep(50_000) }
                                      return n < (1 << 20)
                                  })
        }
        var offset = try s.client.uploadOffset(url: t.url)
        for _ in 0..<200 where offset == 0 { usleep(10_000); offset = try s.client.uploadOffset(url: t.url) } // the server may still be finishing the aborted request
        #expect(offset > 0)
        #expect(offset <= sent)
        #expect(offset < f.size)
        // With Upload-Checksum the partial chunk cannot be verified: it is discarded.
        #expect(throws: ClientError.cancelled) {
            _ = try s.client.patch(url: t.url, offset: offset, fd: fd, fileOffset: offset, length: f.size - offset, progress: { $0 < (256 << 10) })
        }
        #expect(try s.client.uploadOffset(url: t.url) == offset)
        try s.client.uploadFile(fd: fd, size: f.size)
        #expect(try s.hasBlock(f.digest))
    }

    @Test(arguments: Records.all) func wholeBlockPut(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 70_000)
        let fd = f.open()
        defer { close(fd) }
        let put = try s.send("PUT", "/v1/blocks/\(f.digest.hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(put.status == 201)
        let again = try s.send("PUT", "/v1/blocks/\(f.digest.hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(again.status == 200)
        let wrong = try s.send("PUT", "/v1/blocks/\(SHA256Hasher.digest("x").hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(wrong.status == 460)
        #expect(s.blockCount() == 1)
        let big = TestFile(in: s.dir.path, size: Blocks.size + 1, seed: 3)
        let bfd = big.open()
        defer { close(bfd) }
        let tooBig = try s.send("PUT", "/v1/blocks/\(big.digest.hex)", body: .file(fd: bfd, offset: 0, length: big.size))
        #expect(tooBig.status == 413)
        #expect(tooBig.error?.field == "Content-Length")
        // The block PUT is an upload: the file still has to be recorded with its block list.
        try s.record(f, at: "put.bin")
        #expect(try s.client.presentContents([f.content]) == [f.content])
    }

    @Test(arguments: Records.all) func emptyFileNeedsNoUpload(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let empty = ContentHash.of(blocks: [])
        #expect(empty == SHA256Hasher.digest([]))
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: empty, size: 0, blocks: []) else { throw TestFailure("expected a plan") }
        #expect(tickets.isEmpty)
        try s.client.recordFile(FileRecord(path: "empty", hash: empty.hex, size: 0, blocks: [], captureDate: nil, mtime: 1, deviceSequence: 1))
        #expect(try s.client.presentContents([empty]) == [empty])
        #expect(try s.client.createUpload(content: empty, size: 0, blocks: []) == .present)
        let out = open(s.dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: empty, to: out) == 0)
    }
}
