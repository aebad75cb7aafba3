import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

@Suite(.tags(.endToEnd)) struct FileTests {
    @Test(arguments: Records.all) func recordListAndChangeFeed(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let a = try s.uploaded(size: 100, seed: 1)
        let b = try s.uploaded(size: 200, seed: 2)
        let first = FileRecord(path: "Camera Roll/a.jpg", hash: a.content.hex, size: 100, blocks: a.manifest.blocks.map(\.hex),
                               captureDate: 1_600_000_000, mtime: 1_700_000_000, deviceSequence: 1)
        let r1 = try s.client.recordFile(first)
        #expect(r1.sequence == 1)
        #expect(r1.device == "test-device")
        #expect(r1.blocks == nil)  // records carry no block list back
        // Idempotent: the same record keeps its sequence; the content is known now, so no block list is needed.
        let again = try s.client.recordFile(FileRecord(path: "Camera Roll/a.jpg", hash: a.content.hex, size: 100, captureDate: 1_600_000_000, mtime: 1_700_000_000, deviceSequence: 1))
        #expect(again == r1)
        #expect(try s.client.recordFile(first) == r1)
        try s.record(b, at: "Camera Roll/b.jpg", sequence: 2, mtime: 5)
        try s.client.recordFile(FileRecord(path: "Documents/b copy.jpg", hash: b.content.hex, size: 200, captureDate: nil, mtime: 6, deviceSequence: 3))
        #expect(try s.client.listFiles(prefix: "Camera Roll/").map(\.path) == ["Camera Roll/a.jpg", "Camera Roll/b.jpg"])
        #expect(try s.client.listFiles(prefix: "").count == 3)
        #expect(try s.client.listFiles(prefix: "").allSatisfy { $0.hash == ($0.size == 100 ? a.content.hex : b.content.hex) })
        #expect(try s.client.listFiles(prefix: "Documents").map(\.path) == ["Documents/b copy.jpg"])
        #expect(try s.client.listFiles(prefix: "", pageSize: 1).map(\.path) == ["Camera Roll/a.jpg", "Camera Roll/b.jpg", "Documents/b copy.jpg"])
        let page = try WireJSON.decode(FileListResponse.self, from: try s.send("GET", "/v1/files?limit=2").body)
        #expect(page.files.count == 2)
        #expect(page.next == "test-device/Camera Roll/b.jpg")  // without device= the cursor is DEVICE/PATH
        let feed = try s.client.changes(since: 0)
        #expect(feed.records.map(\.sequence) == [1, 2, 3])
        #expect(feed.nextSequence == 3)
        #expect(try s.client.changes(since: 3).records.isEmpty)
        #expect(try s.client.changes(since: 3).nextSequence == 3)
        // A changed record moves to the end of the feed.
        let moved = try s.client.recordFile(FileRecord(path: "Camera Roll/a.jpg", hash: b.content.hex, size: 200, captureDate: nil, mtime: 7, deviceSequence: 4))
        #expect(moved.sequence == 4)
        #expect(try s.client.changes(since: 3).records.map(\.path) == ["Camera Roll/a.jpg"])
        #expect(try s.client.changes(since: 0, limit: 2).records.count == 2)
        // Non-ASCII paths stay inside their prefix's range.
        try s.client.recordFile(FileRecord(path: "Camera Roll/😀 été.jpg", hash: a.content.hex, size: 100, captureDate: nil, mtime: 8, deviceSequence: 5))
        #expect(try s.client.listFiles(prefix: "Camera Roll/").map(\.path) == ["Camera Roll/a.jpg", "Camera Roll/b.jpg", "Camera Roll/😀 été.jpg"])
        #expect(try s.client.listFiles(prefix: "Camera Roll/😀").count == 1)
    }

    @Test(arguments: Records.all) func recordNeedsTheContentAndAValidPath(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let a = try s.uploaded(size: 100, seed: 3)
        let unknown = ContentHash.of(blocks: [SHA256Hasher.digest("missing")])
        // An unknown content without its block list: nothing to check it against.
        let missing = try s.json("POST", "/v1/files", #"{"path":"x","hash":"\#(unknown.hex)","size":1,"mtime":1,"deviceSequence":1}"#)
        #expect(missing.status == 409)
        #expect(missing.error?.error == "content_missing")
        #expect(missing.error?.field == "blocks")
        for bad in ["../etc/passwd", "/abs/path", "a/../b", "a\\u0000b", ""] {
            let r = try s.json("POST", "/v1/files", #"{"path":"\#(bad)","hash":"\#(a.content.hex)","size":100,"blocks":["\#(a.digest.hex)"],"mtime":1,"deviceSequence":1}"#)
            #expect(r.status == 400, "\(bad)")
            #expect(r.error?.field == "path", "\(bad)")
        }
        // The block list is checked against the size and the content hash.
        let wrongSize = try s.json("POST", "/v1/files", #"{"path":"ok","hash":"\#(a.content.hex)","size":\#(Blocks.size + 1),"blocks":["\#(a.digest.hex)"],"mtime":1,"deviceSequence":1}"#)
        #expect(wrongSize.status == 422)
        #expect(wrongSize.error?.field == "blocks")
        let wrongHash = try s.json("POST", "/v1/files", #"{"path":"ok","hash":"\#(a.digest.hex)","size":100,"blocks":["\#(a.digest.hex)"],"mtime":1,"deviceSequence":1}"#)
        #expect(wrongHash.status == 422)
        #expect(wrongHash.error?.error == "content_mismatch")
        #expect(wrongHash.error?.field == "hash")
        #expect(try s.client.listFiles(prefix: "").isEmpty)
        try s.record(a, at: "ok")
        let knownWrongSize = try s.json("POST", "/v1/files", #"{"path":"ok","hash":"\#(a.content.hex)","size":99,"mtime":1,"deviceSequence":1}"#)
        #expect(knownWrongSize.status == 409)
        #expect(knownWrongSize.error?.error == "size_conflict")
        #expect(knownWrongSize.error?.field == "size")
        let badPrefix = try s.send("GET", "/v1/files?prefix=..%2Fx")
        #expect(badPrefix.status == 400)
        let badSince = try s.send("GET", "/v1/changes?since=abc")
        #expect(badSince.status == 400)
        #expect(badSince.error?.field == "since")
    }

    @Test(arguments: Records.all) func watermarkSurvivesAReinstall(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        #expect(try s.client.watermark() == nil)
        try s.client.setWatermark(Watermark(sequence: 42, newestCaptureDate: 1_650_000_000))
        #expect(try s.client.watermark() == Watermark(sequence: 42, newestCaptureDate: 1_650_000_000))
        // Reinstall: the device's token is revoked and re-issued; the cursor stays.
        let reg = try DeviceRegistry(dataDirectory: s.server.configuration.dataDirectory, database: s.database)
        try reg.revoke("test-device")
        let token = try reg.add("test-device")
        let fresh = WorkspaceClient(baseURL: s.base, token: token)
        #expect(try fresh.watermark() == Watermark(sequence: 42, newestCaptureDate: 1_650_000_000))
    }
}

@Suite(.tags(.endToEnd)) struct DownloadTests {
    @Test(arguments: Records.all) func wholeRangeETagAnd304(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = try s.uploaded(size: 300_000, seed: 4)
        try s.record(f, at: "f")
        let out = s.dir.path + "/out"
        let ofd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(ofd) }
        #expect(try s.client.download(content: f.content, to: ofd) == f.size)
        #expect(FileManager.default.contents(atPath: out) == Data(f.bytes))
        let rfd = open(s.dir.path + "/range", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(rfd) }
        #expect(try s.client.download(content: f.content, range: 1000...1999, to: rfd) == 1000)
        #expect(FileManager.default.contents(atPath: s.dir.path + "/range") == Data(f.bytes[1000...1999]))

        for path in ["/v1/contents/\(f.content.hex)", "/v1/blocks/\(f.digest.hex)"] {
            let tag = path.hasPrefix("/v1/contents") ? f.content.hex : f.digest.hex
            let whole = try s.send("GET", path)
            #expect(whole.status == 200)
            #expect(whole.body == f.bytes)
            #expect(whole.header("ETag") == "\"\(tag)\"")
            #expect(whole.header("Accept-Ranges") == "bytes")
            let part = try s.send("GET", path, headers: ["Range: bytes=-10"])
            #expect(part.status == 206)
            #expect(part.body == Array(f.bytes.suffix(10)))
            #expect(part.header("Content-Range") == "bytes 299990-299999/300000")
            let open = try s.send("GET", path, headers: ["Range: bytes=299999-"])
            #expect(open.body == [f.bytes.last!])
            let outside = try s.send("GET", path, headers: ["Range: bytes=400000-"])
            #expect(outside.status == 416)
            #expect(outside.header("Content-Range") == "bytes */300000")
            let cached = try s.send("GET", path, headers: ["If-None-Match: \"\(tag)\""])
            #expect(cached.status == 304)
            #expect(cached.body.isEmpty)
            let head = try s.send("HEAD", path)
            #expect(head.status == 200)
            #expect(head.header("Content-Length") == "300000")
        }
    }

    @Test(arguments: Records.all) func unknownContentIs404AndBadHash400(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        #expect(try s.send("GET", "/v1/contents/\(SHA256Hasher.digest("none").hex)").status == 404)
        #expect(try s.send("GET", "/v1/contents/\(SHA256Hasher.digest("none").hex)/blocks").status == 404)
        #expect(try s.send("GET", "/v1/blocks/\(SHA256Hasher.digest("none").hex)").status == 404)
        let bad = try s.send("GET", "/v1/contents/xyz")
        #expect(bad.status == 400)
        #expect(bad.error?.field == "hash")
        #expect(try s.send("POST", "/v1/contents/\(SHA256Hasher.digest("none").hex)").status == 405)
        #expect(try s.send("GET", "/v1/contents/present").status == 405)
        #expect(try s.send("DELETE", "/v1/blocks/\(SHA256Hasher.digest("none").hex)").status == 405)
        let fd = open("/dev/null", O_WRONLY)
        defer { close(fd) }
        #expect(throws: ClientError.notFound) { try s.client.download(content: SHA256Hasher.digest("none"), to: fd) }
        #expect(throws: ClientError.notFound) { try s.client.downloadBlock(SHA256Hasher.digest("none"), to: fd) }
    }
}
