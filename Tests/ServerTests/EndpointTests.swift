import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

@Suite(.tags(.endToEnd)) struct HealthAndAuthTests {
    @Test(arguments: Records.all) func healthNeedsNoToken(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let h = try s.client.health()
        #expect(h.status == "ok")
    }

    @Test(arguments: Records.all) func openAPIListsExactlyTheServedPaths(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let r = try s.send("GET", "/v1/openapi.json", auth: false)
        #expect(r.status == 200)
        let doc = try JSONSerialization.jsonObject(with: Data(r.body)) as! [String: Any]
        #expect(doc["openapi"] as? String == "3.0.3")
        let paths = Set((doc["paths"] as! [String: Any]).keys)
        #expect(paths == ["/v1/health", "/v1/openapi.json", "/v1/contents/present", "/v1/contents/{hash}", "/v1/contents/{hash}/blocks",
                          "/v1/blocks/{hash}", "/v1/blocks/{hash}/chunks", "/v1/blocks/{hash}/verify", "/v1/blocks", "/v1/blocks/fetch", "/v1/uploads", "/v1/tus", "/v1/tus/{id}", "/v1/files", "/v1/files/versions", "/v1/changes", "/v1/watermark",
                          "/metrics",

                          "/v1/tree", "/v1/tree/changes", "/v1/tree/trash", "/v1/tree/restore", "/v1/tree/nodes/{id}/versions"])
        // Every documented path answers something other than "no such endpoint".
        for path in paths {
            let concrete = path.replacingOccurrences(of: "{hash}", with: String(repeating: "0", count: 64)).replacingOccurrences(of: "{id}", with: "x")
            let reply = try s.send("GET", concrete)
            #expect(reply.error?.error != "not_found" || reply.error?.message.contains("no such endpoint") == false, "\(path)")
        }
        #expect(try s.send("GET", "/v1/nope").status == 404)
    }

    @Test(arguments: Records.all) func missingWrongAndRevokedTokensGet401(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let missing = try s.send("GET", "/v1/watermark", auth: false)
        #expect(missing.status == 401)
        #expect(missing.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
        #expect(missing.error?.error == "unauthorized")
        let wrong = try s.send("GET", "/v1/watermark", headers: ["Authorization: Bearer vdt_nope"], auth: false)
        #expect(wrong.status == 401)
        let basic = try s.send("GET", "/v1/watermark", headers: ["Authorization: Basic eDp5"], auth: false)
        #expect(basic.status == 401)
        #expect(try s.send("GET", "/v1/watermark").status == 200)
        try DeviceRegistry(dataDirectory: s.server.configuration.dataDirectory, database: s.database).revoke("test-device")
        #expect(try s.send("GET", "/v1/watermark").status == 401)
        let refused = try s.send("GET", "/v1/watermark")
        #expect(refused.error?.error == "device_revoked")
        #expect(refused.error?.message.hasPrefix("device 'test-device' was revoked at ") == true, "\(refused.text)")
    }

    @Test func deviceRegistryAddListRevoke() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let reg = try DeviceRegistry(dataDirectory: dir.path)
        let t1 = try reg.add("phone")
        #expect(t1.hasPrefix("vdt_") && t1.count == 68)
        #expect(throws: DeviceRegistry.Failure.exists("phone")) { try reg.add("phone") }
        #expect(throws: DeviceRegistry.Failure.badName("a b")) { try reg.add("a b") }
        #expect(try reg.list().map(\.name) == ["phone"])
        try reg.revoke("phone")
        #expect(try reg.list().first?.revokedAt != nil)
        #expect(throws: DeviceRegistry.Failure.unknown("tablet")) { try reg.revoke("tablet") }
        let t2 = try reg.add("phone")  // a reinstall: new token, same device
        #expect(t2 != t1)
        #expect(try reg.list().first?.revokedAt == nil)
        // The token is stored hashed, never in clear.
        let db = try String(contentsOfFile: dir.path + "/server.db", encoding: .isoLatin1)
        #expect(!db.contains(t2))
    }
}

@Suite(.tags(.endToEnd)) struct DedupTests {
    @Test(arguments: Records.all) func presentReportsOnlyRecordedContents(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 1000)
        let other = SHA256Hasher.digest("not uploaded")
        #expect(try s.client.presentContents([f.content, other]).isEmpty)
        let fd = f.open()
        defer { close(fd) }
        try s.client.uploadFile(fd: fd, size: f.size)
        // Its blocks are there, but a content is present once its manifest is recorded with a file.
        #expect(try s.client.presentContents([f.content, other]).isEmpty)
        try s.record(f, at: "f")
        #expect(try s.client.presentContents([f.content, other]) == [f.content])
        #expect(try s.client.presentContents([f.digest]).isEmpty)  // a block hash is not a content hash
        #expect(try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) == .present)
    }

    @Test(arguments: Records.all) func moreThanTenThousandIsSplitByTheClientAndRefusedByTheServer(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let many = (0..<10_001).map { SHA256Hasher.digest("h\($0)") }
        #expect(try s.client.presentContents(many).isEmpty)
        let body = try JSONEncoder().encode(PresentRequest(hashes: many.map(\.hex)))
        let r = try s.send("POST", "/v1/contents/present", headers: ["Content-Type: application/json", "Expect:"], body: .bytes(Array(body)))
        #expect(r.status == 400)
        #expect(r.error?.error == "too_many_hashes")
        #expect(r.error?.field == "hashes")
    }

    @Test(arguments: Records.all) func badHashInListNamesTheIndex(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let r = try s.json("POST", "/v1/contents/present", #"{"hashes":["\#(String(repeating: "a", count: 64))","xyz"]}"#)
        #expect(r.status == 400)
        #expect(r.error?.field == "hashes.1")
    }
}

@Suite(.tags(.endToEnd)) struct BadInputTests {
    @Test(arguments: Records.all) func badJSONAndWrongTypesName400Fields(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let notJSON = try s.json("POST", "/v1/uploads", "{nope")
        #expect(notJSON.status == 400)
        #expect(notJSON.error?.error == "bad_request")
        let a64 = String(repeating: "a", count: 64)
        let wrongType = try s.json("POST", "/v1/uploads", #"{"content":"\#(a64)","size":"big","blocks":[]}"#)
        #expect(wrongType.status == 400)
        #expect(wrongType.error?.field == "size")
        let missing = try s.json("POST", "/v1/uploads", #"{"size":3,"blocks":[]}"#)
        #expect(missing.error?.field == "content")
        let noBlocks = try s.json("POST", "/v1/uploads", #"{"content":"\#(a64)","size":3}"#)
        #expect(noBlocks.error?.field == "blocks")
        let badHash = try s.json("POST", "/v1/uploads", #"{"content":"abc","size":3,"blocks":["\#(a64)"]}"#)
        #expect(badHash.status == 400)
        #expect(badHash.error?.field == "content")
        let badBlock = try s.json("POST", "/v1/uploads", #"{"content":"\#(a64)","size":\#(Blocks.size + 1),"blocks":["\#(a64)","xyz"]}"#)
        #expect(badBlock.error?.field == "blocks.1")
        let negative = try s.json("POST", "/v1/uploads", #"{"content":"\#(a64)","size":-1,"blocks":[]}"#)
        #expect(negative.error?.field == "size")
        let unknown = try s.json("POST", "/v1/uploads", #"{"content":"\#(a64)","size":0,"blocks":[],"hash":"\#(a64)"}"#)
        #expect(unknown.status == 400)
        #expect(unknown.error?.field == "hash")
        #expect(unknown.error?.message.contains("unknown field") == true)
        let badWatermark = try s.json("PUT", "/v1/watermark", #"{"sequence":"x"}"#)
        #expect(badWatermark.error?.field == "sequence")
    }

    @Test(arguments: Records.all) func invalidUTF8BodyIs400(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        var body = Array(#"{"path":"a"#.utf8)
        body += [0xff, 0xfe]
        body += Array(#"","hash":"\#(String(repeating: "a", count: 64))","size":1,"mtime":1,"deviceSequence":1}"#.utf8)
        let r = try s.send("POST", "/v1/files", headers: ["Content-Type: application/json", "Expect:"], body: .bytes(body))
        #expect(r.status == 400)
    }

    @Test(arguments: Records.all) func oversizedJSONBodyIsRefusedBeforeReading(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let big = [UInt8](repeating: 0x20, count: (1 << 20) + 10)
        let r = try s.send("POST", "/v1/contents/present", headers: ["Content-Type: application/json"], body: .bytes(big))
        #expect(r.status == 413)
        #expect(r.error?.error == "body_too_large")
        // Chunked (no Content-Length) bodies are counted, not kept.
        let chunked = try s.send("PUT", "/v1/watermark", headers: ["Content-Type: application/json", "Transfer-Encoding: chunked", "Expect:"], body: .bytes(big))
        #expect(chunked.status == 413)
        // Calls that carry a block list may be larger (a 1 TiB file's list), up to a bound.
        let manifestSized = try s.send("POST", "/v1/uploads", headers: ["Content-Type: application/json"], body: .bytes(big))
        #expect(manifestSized.status == 400)
        let huge = [UInt8](repeating: 0x20, count: API.maxManifestBody + 1)
        for path in ["/v1/uploads", "/v1/files"] {
            let refused = try s.send("POST", path, headers: ["Content-Type: application/json"], body: .bytes(huge))
            #expect(refused.status == 413, "\(path)")
            let chunkedHuge = try s.send("POST", path, headers: ["Content-Type: application/json", "Transfer-Encoding: chunked", "Expect:"], body: .bytes(huge))
            #expect(chunkedHuge.status == 413, "\(path)")
        }
    }

    /// A connection's memory pool holds a request's head, so its size bounds the longest
    /// URL: the longest path a device can have (4096 bytes, every byte percent-encoded:
    /// 12 KiB) must fit, on a fresh connection and on a kept-alive one (whose head must
    /// fit in the half of the pool libmicrohttpd gives it to read into).
    @Test(arguments: Records.all) func theLongestPathFitsInARequest(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        // 16 names of 127 two-byte characters: 4079 bytes, each sent as %XX.
        let path = (0..<16).map { i in String(repeating: "é", count: 126) + String(UnicodeScalar(UInt8(97 + i))) }.joined(separator: "/")
        #expect(path.utf8.count <= 4096)
        let f = try s.uploaded(size: 1000, seed: 31)
        try s.record(f, at: path)
        let device = try s.client.deviceName()
        let fresh = WorkspaceClient(baseURL: s.base, token: s.token)  // its first call opens a connection; the others reuse it
        for _ in 0..<3 {
            let versions = try fresh.fileVersions(device: device, path: path)
            #expect(versions.map(\.path) == [path])
        }
    }

    @Test(arguments: Records.all) func oversizedHeadersAreRefused(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let huge = "X-Filler: " + String(repeating: "a", count: 300_000)
        let r = try s.send("GET", "/v1/health", headers: [huge])
        #expect(r.status == 431 || r.status == 413)
        #expect(try s.client.health().status == "ok")
    }
}
