import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

/// Helpers for tus requests on presigned URLs.
extension TestServer {
    func patch(_ url: String, offset: Int64, bytes: [UInt8], checksum: [UInt8]? = nil, contentType: String = Tus.offsetContentType) throws -> HTTPResult {
        var headers = ["Tus-Resumable: 1.0.0", "Content-Type: \(contentType)", "Upload-Offset: \(offset)"]
        if let checksum { headers.append("Upload-Checksum: sha256 " + Base64.encode(checksum)) }
        return try send("PATCH", url, headers: headers, body: .bytes(bytes), auth: false)
    }

    func head(_ url: String) throws -> HTTPResult { try send("HEAD", url, headers: ["Tus-Resumable: 1.0.0"], auth: false) }

    func ticket(_ f: TestFile) throws -> (url: String, offset: Int64) {
        guard case .upload(let url, let offset, _) = try client.createUpload(hash: f.digest, size: f.size) else { throw TestFailure("expected an upload") }
        return (url, offset)
    }
}

@Suite struct UploadTests {
    @Test func createIsIdempotentAndReportsTheCurrentOffset() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 3 << 20)
        let first = try s.ticket(f)
        #expect(first.offset == 0)
        let bytes = f.bytes
        let r = try s.patch(first.url, offset: 0, bytes: Array(bytes[0..<(1 << 20)]))
        #expect(r.status == 204)
        #expect(r.header("Upload-Offset") == "\(1 << 20)")
        let second = try s.ticket(f)
        #expect(second.offset == 1 << 20)
        #expect(second.url.components(separatedBy: "?")[0] == first.url.components(separatedBy: "?")[0])
        // Same hash, other size: refused.
        #expect(throws: ClientError.self) { try s.client.createUpload(hash: f.digest, size: f.size + 1) }
        let fd = f.open()
        defer { close(fd) }
        try s.client.uploadBlob(hash: f.digest, size: f.size, fd: fd, chunkSize: 1 << 20)
        #expect(try s.client.createUpload(hash: f.digest, size: f.size) == .present)
        #expect(s.blobCount() == 1)
    }

    @Test func tusOptionsHeadAndExpires() throws {
        let s = try TestServer()
        defer { s.stop() }
        let options = try s.send("OPTIONS", "/v1/tus", auth: false)
        #expect(options.status == 204)
        #expect(options.header("Tus-Version") == "1.0.0")
        #expect(options.header("Tus-Extension") == "creation,checksum,expiration,termination")
        #expect(options.header("Tus-Checksum-Algorithm") == "sha256")
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

    @Test func tamperedOrExpiredURLIs403AndWritesNothing() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 1000)
        let t = try s.ticket(f)
        let tampered = t.url.replacingOccurrences(of: "size=1000", with: "size=999")
        let r = try s.patch(tampered, offset: 0, bytes: Array(f.bytes[0..<999]))
        #expect(r.status == 403)
        #expect(try s.client.uploadOffset(url: t.url) == 0)
        let noSig = String(t.url.prefix { $0 != "&" }) // drops size, expires, sig
        #expect(try s.head(noSig).status == 403)
        #expect(throws: ClientError.expired) { try s.client.uploadOffset(url: tampered) }

        let expiring = try TestServer(uploadExpiry: -10)
        defer { expiring.stop() }
        let e = try expiring.ticket(f)
        let er = try expiring.patch(e.url, offset: 0, bytes: f.bytes)
        #expect(er.status == 403)
        #expect(er.error?.message.contains("expired") == true)
        #expect(expiring.blobCount() == 0)
    }

    @Test func offsetMismatchIs409WithTheServersOffset() throws {
        let s = try TestServer()
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

    @Test func bodyLongerThanDeclaredIs413() throws {
        let s = try TestServer()
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

    @Test func wrongContentTypeIs415() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 10)
        let t = try s.ticket(f)
        #expect(try s.patch(t.url, offset: 0, bytes: f.bytes, contentType: "application/octet-stream").status == 415)
    }

    @Test func chunkChecksumMismatchIs460AndDiscardsTheChunk() throws {
        let s = try TestServer()
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
        #expect(try s.client.presentHashes([f.digest]) == [f.digest])
    }

    @Test func wholeBlobMismatchStoresNothingAndRestartsAtZero() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 5000)
        let liar = SHA256Hasher.digest("something else")
        guard case .upload(let url, _, _) = try s.client.createUpload(hash: liar, size: f.size) else { throw TestFailure("expected upload") }
        let r = try s.patch(url, offset: 0, bytes: f.bytes)
        #expect(r.status == 460)
        #expect(r.error?.error == "blob_checksum_mismatch")
        #expect(s.blobCount() == 0)
        #expect(try s.client.uploadOffset(url: url) == 0)
        #expect(try s.client.presentHashes([liar, f.digest]).isEmpty)
        let fd = f.open()
        defer { close(fd) }
        #expect(throws: ClientError.self) { try s.client.uploadBlob(hash: liar, size: f.size, fd: fd) }
    }

    @Test func terminationRemovesTheUploadThen404() throws {
        let s = try TestServer()
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

    @Test func disconnectMidPatchKeepsTheBytesReceived() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 32 << 20)
        let t = try s.ticket(f)
        let fd = f.open()
        defer { close(fd) }
        var sent: Int64 = 0
        // No Upload-Checksum: bytes received before the disconnect count.
        #expect(throws: ClientError.cancelled) {
            _ = try s.raw.perform(method: "PATCH", url: t.url, headers: ["Tus-Resumable: 1.0.0", "Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 0"],
                                  body: .file(fd: fd, offset: 0, length: f.size), progress: { n in sent = n; return n < (8 << 20) })
        }
        var offset = try s.client.uploadOffset(url: t.url)
        for _ in 0..<200 where offset == 0 { usleep(10_000); offset = try s.client.uploadOffset(url: t.url) } // the server may still be finishing the aborted request
        #expect(offset > 0)
        #expect(offset <= sent)
        // With Upload-Checksum the partial chunk cannot be verified: it is discarded.
        #expect(throws: ClientError.cancelled) {
            _ = try s.client.patch(url: t.url, offset: offset, fd: fd, fileOffset: offset, length: f.size - offset, progress: { $0 < (4 << 20) })
        }
        #expect(try s.client.uploadOffset(url: t.url) == offset)
        try s.client.uploadBlob(hash: f.digest, size: f.size, fd: fd)
        #expect(try s.client.presentHashes([f.digest]) == [f.digest])
    }

    @Test func wholeBlobPut() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 70_000)
        let fd = f.open()
        defer { close(fd) }
        let put = try s.send("PUT", "/v1/blobs/\(f.digest.hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(put.status == 201)
        let again = try s.send("PUT", "/v1/blobs/\(f.digest.hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(again.status == 200)
        let wrong = try s.send("PUT", "/v1/blobs/\(SHA256Hasher.digest("x").hex)", body: .file(fd: fd, offset: 0, length: f.size))
        #expect(wrong.status == 460)
        #expect(s.blobCount() == 1)
    }

    @Test func emptyBlobIsPresentAtOnce() throws {
        let s = try TestServer()
        defer { s.stop() }
        let empty = SHA256Hasher.digest([])
        #expect(try s.client.createUpload(hash: empty, size: 0) == .present)
        #expect(try s.client.presentHashes([empty]) == [empty])
    }
}
