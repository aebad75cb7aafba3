import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

/// Raw HTTP against a real `vdrive serve`: malformed and extreme framing and tus headers,
/// byte ranges, query numbers and JSON numbers, bodies cut off, on every route, the
/// presigned ones included. The contract test (ContractTests) drives the server through
/// an HTTP client from the OpenAPI document, so every request it sends is well-formed
/// HTTP; here the bytes on the socket are the test's own.
///
/// The server faces the internet: no request may stop it. After every case the process
/// must still run (`kill(pid, 0)`) and answer `GET /v1/health`; a trap (Swift's overflow
/// check) or an exit fails the test naming the case. An answer of 5xx fails it too (a
/// 500 is a bug: Docs/protocol.md). A seeded random part sends random nasty values on
/// random routes and prints its seed (`VDRIVE_FUZZ_SEED=N` replays one).
@Suite(.tags(.endToEnd), .serialized) struct RawHTTPFuzzTests {
    /// The two kinds of server: records in SQLite and blocks in its data folder (tus
    /// uploads), or records in PostgreSQL and blocks in SeaweedFS (presigned S3 PUTs).
    enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case embedded
        case scaled
        var testDescription: String { rawValue }
    }

    /// The reported crash: a PATCH at offset 1 declaring 2^63-1 bytes made the server
    /// compute `offset + length` and trap. It is refused at the headers instead.
    @Test func aPatchDeclaringInt64MaxBytesIsRefusedNotACrash() throws {
        let target = try Target(.embedded)
        defer { target.stop() }
        let c = try RawConnection(port: target.port)
        c.send(Target.request("PATCH", target.upload, target.tusHeaders + ["Upload-Offset: 1", "Content-Length: 9223372036854775807"]))
        let reply = c.reply(timeout: 5)
        c.close()
        try target.expectAlive(after: "PATCH at offset 1 with Content-Length 2^63-1")
        #expect(reply?.status == 413, "\(reply?.headText ?? "no reply")")
        #expect(reply?.error?.error == "body_too_large", "\(reply?.text ?? "")")
        #expect(reply?.header(Tus.uploadOffset) == "1", "the reply says where the upload stands")
        // The upload is untouched: the next PATCH goes on from byte 1.
        #expect(try target.client.uploadOffset(url: target.base + target.upload) == 1)
    }

    /// The answers to the extreme values name what was wrong, with a 4xx.
    @Test(arguments: Backend.allCases) func extremeNumbersGetAClearRefusal(_ backend: Backend) throws {
        let target = try Target(backend)
        defer { target.stop() }
        var cases = [
            Case("PUT of a block with Content-Length 2^63-1", Target.request("PUT", "/v1/blocks/\(target.missing.digest.hex)", target.auth + ["Content-Length: 9223372036854775807"]),
                 expect: 413, field: "Content-Length"),
            Case("POST /v1/uploads with Content-Length 2^63", Target.request("POST", "/v1/uploads", target.auth + ["Content-Length: 9223372036854775808"]),
                 expect: 413, field: "Content-Length"),
            Case("Content-Length twice, two values", Target.request("POST", "/v1/files", target.auth + ["Content-Length: 2", "Content-Length: 0"]),
                 expect: 400, field: "Content-Length"),
            Case("chunked and Content-Length together", Target.request("POST", "/v1/contents/present", target.auth + ["Transfer-Encoding: chunked", "Content-Length: 5"],
                                                                        body: Array("0\r\n\r\n".utf8)), expect: 400, field: "Transfer-Encoding"),
            Case("size 2^63-1 in POST /v1/uploads", Target.json("POST", "/v1/uploads", target.auth, #"{"content":"\#(target.content.hex)","size":9223372036854775807,"blocks":[]}"#),
                 expect: 400, field: "size"),
            Case("size 2^64 in POST /v1/uploads", Target.json("POST", "/v1/uploads", target.auth, #"{"content":"\#(target.content.hex)","size":18446744073709551616,"blocks":[]}"#),
                 expect: 400, field: "size"),
            Case("since 2^64 in the change feed", Target.request("GET", "/v1/changes?since=18446744073709551616", target.auth), expect: 400, field: "since"),
            Case("limit 2^63 in a listing", Target.request("GET", "/v1/files?limit=9223372036854775808", target.auth), expect: 400, field: "limit"),
            Case("since 2^64 in the tree", Target.request("GET", "/v1/tree?since=18446744073709551616", target.auth), expect: 400, field: "since"),
            Case("wait 2^63 in the tree", Target.request("GET", "/v1/tree?wait=9223372036854775808", target.auth), expect: 400, field: "wait"),
            Case("limit 2^63 in the trash", Target.request("GET", "/v1/tree/trash?limit=9223372036854775808", target.auth), expect: 400, field: "limit"),
            Case("base 2^64 in a tree change", Target.json("POST", "/v1/tree/changes", target.auth, #"{"changes":[{"op":"delete","id":"\#(Self.nodeID)","base":18446744073709551616}]}"#),
                 expect: 400, field: "changes.0.base"),
            Case("mtime 2^63-1 in a tree change", Target.json("POST", "/v1/tree/changes", target.auth,
                 #"{"changes":[{"op":"put","id":"\#(Self.nodeID)","base":0,"parent":"\#(TreeNode.rootID)","name":"a","kind":"folder","mtime":9223372036854775807}]}"#),
                 expect: 400, field: "changes.0.mtime"),
            Case("size 2^63-1 in a tree change", Target.json("POST", "/v1/tree/changes", target.auth,
                 #"{"changes":[{"op":"put","id":"\#(Self.nodeID)","base":0,"parent":"\#(TreeNode.rootID)","name":"a","kind":"file","hash":"\#(target.content.hex)","size":9223372036854775807,"mtime":1}]}"#),
                 expect: 400, field: "changes.0.size"),
            Case("base 2^63-1 in a tree change", Target.json("POST", "/v1/tree/changes", target.auth, #"{"changes":[{"op":"delete","id":"\#(Self.nodeID)","base":9223372036854775807}]}"#),
                 expect: 200),
            Case("since 2^63-1 in a restore", Target.json("POST", "/v1/tree/restore", target.auth, #"{"under":"\#(TreeNode.rootID)","since":9223372036854775807}"#), expect: 200),
            Case("Range from 2^63-1", Target.request("GET", "/v1/contents/\(target.content.hex)", target.auth + ["Range: bytes=9223372036854775807-"]), expect: 416),
            Case("Range from beyond 2^64", Target.request("GET", "/v1/contents/\(target.content.hex)", target.auth + ["Range: bytes=99999999999999999999-"]), expect: 416),
            Case("Range to beyond 2^64", Target.request("GET", "/v1/contents/\(target.content.hex)", target.auth + ["Range: bytes=0-99999999999999999999"]), expect: 206),
            Case("Range of a suffix beyond 2^64", Target.request("GET", "/v1/contents/\(target.content.hex)", target.auth + ["Range: bytes=-99999999999999999999"]), expect: 206),
            Case("presigned size 2^64", Target.request("HEAD", "/v1/tus/0?hash=\(target.block.hex)&size=18446744073709551616&expires=1&sig=\(String(repeating: "0", count: 64))", []),
                 expect: 400),
        ]
        if backend == .embedded {
            cases += [
                Case("Upload-Offset 2^64", Target.request("PATCH", target.upload, target.tusHeaders + ["Upload-Offset: 18446744073709551616", "Content-Length: 0"]),
                     expect: 400, field: Tus.uploadOffset),
                Case("Upload-Offset -1", Target.request("PATCH", target.upload, target.tusHeaders + ["Upload-Offset: -1", "Content-Length: 0"]),
                     expect: 400, field: Tus.uploadOffset),
                Case("Upload-Offset 2^63-1", Target.request("PATCH", target.upload, target.tusHeaders + ["Upload-Offset: 9223372036854775807", "Content-Length: 0"]),
                     expect: 409, field: Tus.uploadOffset),
                Case("PATCH Content-Length 2^64-1", Target.request("PATCH", target.upload, target.tusHeaders + ["Upload-Offset: 1", "Content-Length: 18446744073709551615"]),
                     expect: 413, field: "Content-Length"),
                Case("Upload-Length 2^63 at creation", Target.request("POST", "/v1/tus", target.auth + ["Tus-Resumable: 1.0.0", "Upload-Length: 9223372036854775808",
                                                                                                         "Upload-Metadata: sha256 " + Base64.encode(target.missing.digest.bytes)]),
                     expect: 413, field: Tus.uploadLength),
            ]
        }
        for c in cases {
            let reply = try target.run(c)
            #expect(reply?.status == c.expect, "\(c.name): \(reply?.headText ?? "no reply") \(reply?.text ?? "")")
            if let field = c.field { #expect(reply?.error?.field == field, "\(c.name): \(reply?.text ?? "no reply")") }
            if let reply, reply.status >= 400, !c.head {
                #expect(reply.error?.message.isEmpty == false, "\(c.name): an error says what was wrong: \(reply.text)")
            }
        }
    }

    /// A table of malformed and extreme headers and bodies on every route; the server
    /// stays up through all of them and never answers 5xx.
    @Test(arguments: Backend.allCases) func everyRouteSurvivesMalformedRequests(_ backend: Backend) throws {
        let target = try Target(backend)
        defer { target.stop() }
        let cases = Self.table(target)
        for c in cases { _ = try target.run(c) }
        print("RawHTTPFuzzTests: \(cases.count) cases against the \(backend) server")
    }

    /// Random requests from nasty parts: a route, a method, headers with extreme values,
    /// a body that matches its Content-Length or not, sent whole or cut.
    @Test(arguments: Backend.allCases) func seededRandomRequestsNeverStopTheServer(_ backend: Backend) throws {
        let target = try Target(backend)
        defer { target.stop() }
        let seed = ProcessInfo.processInfo.environment["VDRIVE_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        print("RawHTTPFuzzTests: seed \(seed) (\(backend)); replay with VDRIVE_FUZZ_SEED=\(seed)")
        var rng = SeededGenerator(seed: seed)
        let count = backend == .embedded ? 1000 : 300
        for i in 0..<count {
            var c = Self.randomCase(target, &rng)
            c.name = "seed \(seed) request \(i): \(c.name)"
            _ = try target.run(c)
        }
    }
}

// MARK: - Cases

extension RawHTTPFuzzTests {
    /// One request as bytes, how it is sent, and what its answer must be.
    struct Case {
        enum Mode {
            /// Everything, then the reply is read.
            case whole
            /// Everything, then end of file from this side (the body may be shorter than declared).
            case halfClose
            /// The first `n` bytes, then the connection is reset (a client killed mid-request).
            case cut(Int)
        }
        var name: String
        let bytes: [UInt8]
        let mode: Mode
        /// The status the answer must have; nil: any below 500, or none.
        let expect: Int?
        /// The `field` the error body must name.
        let field: String?
        let head: Bool

        init(_ name: String, _ bytes: [UInt8], mode: Mode = .whole, expect: Int? = nil, field: String? = nil) {
            self.name = name; self.bytes = bytes; self.mode = mode; self.expect = expect; self.field = field
            head = bytes.starts(with: Array("HEAD ".utf8))
        }
    }

    /// Numbers a client may write where the server expects one: the bounds of Int64 and
    /// UInt64 and past them, signs, spaces, other bases, empty.
    static let numbers = ["0", "1", "4194304", "4194305", "9223372036854775807", "9223372036854775808", "18446744073709551615",
                          "18446744073709551616", "99999999999999999999999999999999", "-1", "-0", "-9223372036854775808",
                          "+1", " 7", "1 1", "0x10", "1e3", "1.5", "", "abc", "\u{FF11}", "00000000000000000000000000001", "1,1"]

    /// Every route as (method, target, headers), with what it needs to get past
    /// authentication and the first checks: the starting point of each case.
    static func routes(_ t: Target) -> [(String, String, [String])] {
        let dead = "/v1/tus/00000000000000000000000000000000?hash=\(t.block.hex)&size=1000&expires=4102444800&sig=\(String(repeating: "0", count: 64))"
        return [
            ("GET", "/v1/health", []), ("HEAD", "/v1/health", []), ("GET", "/v1/openapi.json", []), ("OPTIONS", "/v1/tus", []),
            ("POST", "/v1/tus", t.auth + ["Tus-Resumable: 1.0.0", "Upload-Length: 1000", "Upload-Metadata: sha256 " + Base64.encode(t.missing.digest.bytes)]),
            ("HEAD", t.upload, ["Tus-Resumable: 1.0.0"]), ("PATCH", t.upload, t.tusHeaders + ["Upload-Offset: 1", Self.wrongChecksum]),
            ("OPTIONS", t.upload, []), ("PATCH", dead, t.tusHeaders + ["Upload-Offset: 0"]), ("DELETE", dead, ["Tus-Resumable: 1.0.0"]),
            ("PUT", "/v1/blocks/\(t.missing.digest.hex)", t.auth), ("GET", "/v1/blocks/\(t.block.hex)", t.auth), ("HEAD", "/v1/blocks/\(t.block.hex)", t.auth),
            ("GET", "/v1/blocks/\(t.block.hex)/chunks", t.auth), ("POST", "/v1/blocks/\(t.missing.digest.hex)/verify", t.auth),
            ("GET", "/v1/contents/\(t.content.hex)", t.auth), ("HEAD", "/v1/contents/\(t.content.hex)", t.auth),
            ("GET", "/v1/contents/\(t.content.hex)/blocks", t.auth), ("POST", "/v1/contents/present", t.auth + ["Content-Type: application/json"]),
            ("POST", "/v1/uploads", t.auth + ["Content-Type: application/json"]), ("POST", "/v1/files", t.auth + ["Content-Type: application/json"]),
            ("GET", "/v1/files", t.auth), ("GET", "/v1/files/versions?device=fuzz&path=Camera%20Roll/stored.jpg", t.auth),
            ("GET", "/v1/changes", t.auth), ("GET", "/v1/watermark", t.auth), ("PUT", "/v1/watermark", t.auth + ["Content-Type: application/json"]),
            ("GET", "/v1/tree", t.auth), ("GET", "/v1/tree?since=0&limit=1&wait=0", t.auth), ("POST", "/v1/tree/changes", t.auth + ["Content-Type: application/json"]),
            ("GET", "/v1/tree/trash", t.auth), ("POST", "/v1/tree/restore", t.auth + ["Content-Type: application/json"]),
            ("GET", "/v1/tree/nodes/\(String(repeating: "ab", count: 16))/versions", t.auth),
            ("GET", "/v1/nowhere", t.auth),
        ]
    }

    /// The table: every route with each kind of damage.
    static func table(_ t: Target) -> [Case] {
        var cases: [Case] = []
        let routes = Self.routes(t)
        let x = Array("x".utf8)
        for (method, path, headers) in routes {
            let route = "\(method) \(path.prefix(40))"
            // Content-Length: every nasty number, one byte of body, then end of file.
            for n in numbers {
                cases.append(Case("\(route) Content-Length '\(n)'", request(method, path, headers + ["Content-Length: \(n)"], body: x), mode: .halfClose))
            }
            cases.append(Case("\(route) Content-Length twice", request(method, path, headers + ["Content-Length: 1", "Content-Length: 9223372036854775807"], body: x), mode: .halfClose))
            cases.append(Case("\(route) Content-Length twice, same", request(method, path, headers + ["Content-Length: 1", "Content-Length: 1"], body: x), mode: .halfClose))
            cases.append(Case("\(route) Content-Length list", request(method, path, headers + ["Content-Length: 1, 1"], body: x), mode: .halfClose))
            // Transfer-Encoding: chunk sizes bad, huge, cut; with Content-Length; other codings.
            for (what, chunked) in chunkedBodies {
                cases.append(Case("\(route) chunked: \(what)", request(method, path, headers + ["Transfer-Encoding: chunked"], body: chunked), mode: .halfClose))
            }
            cases.append(Case("\(route) chunked and Content-Length", request(method, path, headers + ["Transfer-Encoding: chunked", "Content-Length: 3"], body: Array("1\r\nx\r\n0\r\n\r\n".utf8)), mode: .halfClose))
            cases.append(Case("\(route) Transfer-Encoding gzip", request(method, path, headers + ["Transfer-Encoding: gzip"], body: x), mode: .halfClose))
            cases.append(Case("\(route) Transfer-Encoding twice", request(method, path, headers + ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"], body: Array("0\r\n\r\n".utf8)), mode: .halfClose))
            // A body cut off: declared 1000 bytes, 10 sent, then a reset.
            let cut = request(method, path, headers + ["Content-Length: 1000"], body: Array(repeating: 0x61, count: 1000))
            cases.append(Case("\(route) body cut after 10 of 1000 bytes", cut, mode: .cut(cut.count - 990)))
            cases.append(Case("\(route) cut inside the headers", cut, mode: .cut(cut.count / 3)))
            // Host: none, huge, odd.
            cases.append(Case("\(route) without Host", request(method, path, host: nil, headers)))
            cases.append(Case("\(route) HTTP/1.0 without Host", request(method, path, host: nil, version: "HTTP/1.0", headers)))
            cases.append(Case("\(route) Host of 100 KiB", request(method, path, host: String(repeating: "h", count: 100 << 10), headers)))
            cases.append(Case("\(route) Host with a port past 65535", request(method, path, host: "127.0.0.1:99999999999999999999", headers)))
            // Range: past Int64, empty, reversed, several, garbage.
            for range in ranges {
                cases.append(Case("\(route) Range '\(range.prefix(40))'", request(method, path, headers + ["Range: \(range)"])))
            }
        }
        // tus headers on the upload (and creation), each nasty value.
        for n in numbers {
            cases.append(Case("PATCH Upload-Offset '\(n)'", request("PATCH", t.upload, t.tusHeaders + ["Upload-Offset: \(n)", "Content-Length: 1", wrongChecksum], body: x)))
            cases.append(Case("PATCH at offset 1, Content-Length '\(n)'", request("PATCH", t.upload, t.tusHeaders + ["Upload-Offset: 1", "Content-Length: \(n)", wrongChecksum]), mode: .halfClose))
            cases.append(Case("POST /v1/tus Upload-Length '\(n)'", request("POST", "/v1/tus", t.auth + ["Tus-Resumable: 1.0.0", "Upload-Length: \(n)",
                                                                                                      "Upload-Metadata: sha256 " + Base64.encode(t.missing.digest.bytes)])))
            for query in ["size=\(n)&expires=4102444800", "size=1000&expires=\(n)"] {
                cases.append(Case("HEAD presigned '\(query)'", request("HEAD", "/v1/tus/0?hash=\(t.block.hex)&\(query)&sig=\(String(repeating: "0", count: 64))", [])))
            }
            for query in ["since=\(n)", "limit=\(n)", "since=\(n)&limit=\(n)"] {
                cases.append(Case("GET /v1/changes?\(query)", request("GET", "/v1/changes?" + percent(query), t.auth)))
            }
            cases.append(Case("GET /v1/files?limit=\(n)", request("GET", "/v1/files?limit=" + percent(n), t.auth)))
            // JSON numbers where sizes, times and sequences go.
            cases.append(Case("POST /v1/uploads size \(n)", json("POST", "/v1/uploads", t.auth, #"{"content":"\#(t.content.hex)","size":\#(n),"blocks":["\#(t.block.hex)"]}"#)))
            cases.append(Case("POST /v1/files numbers \(n)", json("POST", "/v1/files", t.auth,
                                                                 #"{"path":"a","hash":"\#(t.content.hex)","size":\#(n),"mtime":\#(n),"deviceSequence":\#(n),"captureDate":\#(n)}"#)))
            cases.append(Case("PUT /v1/watermark \(n)", json("PUT", "/v1/watermark", t.auth, #"{"sequence":\#(n),"newestCaptureDate":\#(n)}"#)))
            // The workspace tree: query numbers, and numbers in changes and restores.
            for query in ["since=\(n)", "limit=\(n)", "wait=\(n)", "since=\(n)&limit=\(n)&wait=\(n)"] {
                cases.append(Case("GET /v1/tree?\(query)", request("GET", "/v1/tree?" + percent(query), t.auth)))
            }
            cases.append(Case("GET /v1/tree/trash?after=\(n)&limit=\(n)", request("GET", "/v1/tree/trash?" + percent("after=\(n)&limit=\(n)"), t.auth)))
            cases.append(Case("POST /v1/tree/changes numbers \(n)", json("POST", "/v1/tree/changes", t.auth,
                #"{"changes":[{"op":"put","id":"\#(Self.nodeID)","base":\#(n),"parent":"\#(TreeNode.rootID)","name":"a","kind":"file","hash":"\#(t.content.hex)","size":\#(n),"mtime":\#(n)}]}"#)))
            cases.append(Case("POST /v1/tree/changes delete base \(n)", json("POST", "/v1/tree/changes", t.auth, #"{"changes":[{"op":"delete","id":"\#(Self.nodeID)","base":\#(n)}]}"#)))
            cases.append(Case("POST /v1/tree/restore since \(n)", json("POST", "/v1/tree/restore", t.auth, #"{"under":"\#(TreeNode.rootID)","since":\#(n)}"#)))
        }
        // Tree values no device sends: bad ids, names with '/', '..' or NUL, targets too long, too many changes.
        for (what, change) in Self.badTreeChanges(t) {
            cases.append(Case("POST /v1/tree/changes: \(what)", json("POST", "/v1/tree/changes", t.auth, #"{"changes":[\#(change)]}"#)))
        }
        cases.append(Case("POST /v1/tree/changes: 1001 changes", json("POST", "/v1/tree/changes", t.auth,
            #"{"changes":[\#(Array(repeating: #"{"op":"delete","id":"\#(Self.nodeID)","base":1}"#, count: 1001).joined(separator: ","))]}"#)))
        for id in ["", "x", String(repeating: "A", count: 32), String(repeating: "a", count: 33), "%00", "..%2F..", String(repeating: "a", count: 100 << 10)] {
            cases.append(Case("GET versions of '\(id.prefix(20))'", request("GET", "/v1/tree/nodes/\(id)/versions", t.auth)))
            cases.append(Case("restore ids ['\(id.prefix(20))']", json("POST", "/v1/tree/restore", t.auth, #"{"ids":["\#(id)"]}"#)))
        }
        for checksum in ["sha256 !!!!", "sha256 " + Base64.encode(Array(repeating: 7, count: 31)), "sha256 " + Base64.encode(Array(repeating: 7, count: 33)),
                         "md5 " + Base64.encode(Array(repeating: 7, count: 16)), "sha256", "sha256 ", "sha256 " + String(repeating: "A", count: 100 << 10),
                         "sha256 " + String(repeating: "=", count: 44)] {
            cases.append(Case("PATCH Upload-Checksum '\(checksum.prefix(30))'", request("PATCH", t.upload, t.tusHeaders + ["Upload-Offset: 1", "Content-Length: 1", "Upload-Checksum: \(checksum)"], body: x)))
        }
        for metadata in ["sha256", "sha256 !!!", "sha256 " + String(repeating: "QUFB", count: 30_000), String(repeating: "k v,", count: 20_000)] {
            cases.append(Case("POST /v1/tus Upload-Metadata '\(metadata.prefix(30))'", request("POST", "/v1/tus", t.auth + ["Tus-Resumable: 1.0.0", "Upload-Length: 1000", "Upload-Metadata: \(metadata)"])))
        }
        // JSON that is deep, long or odd.
        cases.append(Case("present: 1 MiB of '['", json("POST", "/v1/contents/present", t.auth, String(repeating: "[", count: (1 << 20) - 1))))
        cases.append(Case("present: nested objects", json("POST", "/v1/contents/present", t.auth, String(repeating: #"{"hashes":"#, count: 50_000))))
        cases.append(Case("present: 1e999", json("POST", "/v1/contents/present", t.auth, #"{"hashes":[1e999]}"#)))
        cases.append(Case("uploads: 262145 blocks", json("POST", "/v1/uploads", t.auth, #"{"content":"\#(t.content.hex)","size":1,"blocks":[\#(Array(repeating: "\"\(t.block.hex)\"", count: 262_145).joined(separator: ","))]}"#)))
        cases.append(Case("files: blocks not strings", json("POST", "/v1/files", t.auth, #"{"path":"a","hash":"\#(t.content.hex)","size":1,"mtime":1,"deviceSequence":1,"blocks":[1,2,3]}"#)))
        // Not HTTP, or barely.
        for raw in ["GARBAGE\r\n\r\n", "GET\r\n\r\n", "GET /v1/health HTTP/9.9\r\nHost: a\r\n\r\n", "GET /v1/health\r\n\r\n",
                    "GET http://127.0.0.1/v1/health HTTP/1.1\r\nHost: a\r\n\r\n", "GET /v1/health HTTP/1.1\r\nno colon here\r\n\r\n",
                    "GET /v1/health HTTP/1.1\r\nHost: a\r\n folded: line\r\n\r\n", "GET /v1/health HTTP/1.1\r\nHost: a\u{0}b\r\n\r\n",
                    "GET /v1/\u{0}health HTTP/1.1\r\nHost: a\r\n\r\n", "GET /v1/contents/%00 HTTP/1.1\r\nHost: a\r\n\r\n",
                    "GET /" + String(repeating: "a", count: 300 << 10) + " HTTP/1.1\r\nHost: a\r\n\r\n",
                    "GET /v1/health HTTP/1.1\r\nHost: a\r\nX: " + String(repeating: "b", count: 300 << 10) + "\r\n\r\n",
                    "GET /v1/health HTTP/1.1\r\nHost: a\r\n" + String(repeating: "X-A: b\r\n", count: 40_000) + "\r\n",
                    "\r\n\r\n\r\n", "\u{16}\u{3}\u{1}\u{0}\u{a5}\u{1}\u{0}\u{0}\u{a1}\u{3}\u{3}"] {
            cases.append(Case("raw '\(raw.prefix(40).debugDescription)'", Array(raw.utf8), mode: .halfClose))
        }
        return cases
    }

    /// A node id the fuzzed changes name.
    static let nodeID = String(repeating: "0f", count: 16)

    /// Tree changes that break a rule, as JSON objects: each is refused (400, or the
    /// change's own 422), never applied, never a 5xx.
    static func badTreeChanges(_ t: Target) -> [(String, String)] {
        let root = TreeNode.rootID
        func put(id: String = nodeID, parent: String = root, name: String = "a", extra: String = #","kind":"folder""#) -> String {
            #"{"op":"put","id":"\#(id)","base":0,"parent":"\#(parent)","name":\#(name)\#(extra),"mtime":1}"#
        }
        return [
            ("id of 31 digits", put(id: String(nodeID.dropLast()))), ("id in capitals", put(id: nodeID.uppercased())), ("id not hex", put(id: String(repeating: "g", count: 32))),
            ("parent not an id", put(parent: "..")), ("the root's id", put(id: root)),
            ("name with '/'", put(name: #""a/b""#)), ("name '..'", put(name: #"".."""#)), ("name '.'", put(name: #""."""#)), ("name empty", put(name: #""""#)),
            ("name with NUL", put(name: #""a\u0000b""#)), ("name of 256 bytes", put(name: "\"" + String(repeating: "n", count: 256) + "\"")),
            ("name of 128 two-byte characters", put(name: "\"" + String(repeating: "é", count: 128) + "\"")),
            ("name a number", put(name: "7")), ("name null", put(name: "null")),
            ("target of 4097 bytes", put(extra: #","kind":"symlink","target":""# + String(repeating: "t", count: 4097) + "\"")),
            ("target of 4096 bytes in 2048 characters", put(extra: #","kind":"symlink","target":""# + String(repeating: "é", count: 2048) + "\"")),
            ("target with NUL", put(extra: #","kind":"symlink","target":"a\u0000""#)),
            ("kind unknown", put(extra: #","kind":"device""#)), ("op unknown", #"{"op":"move","id":"\#(nodeID)","base":0}"#),
            ("hash null", put(extra: #","kind":"file","hash":null,"size":0"#)), ("unknown field", put(extra: #","kind":"folder","colour":"red""#)),
            ("delete with a name", #"{"op":"delete","id":"\#(nodeID)","base":0,"name":"a"}"#),
            ("mtime 2^62 + 1", #"{"op":"put","id":"\#(nodeID)","base":0,"parent":"\#(root)","name":"a","kind":"folder","mtime":4611686018427387905}"#),
            ("blocks not hashes", put(extra: #","kind":"file","hash":"\#(t.content.hex)","size":1,"blocks":["x"]"#)),
        ]
    }

    /// Chunked bodies: sizes that are not hex, negative, past 2^64, a chunk cut short, no end.
    static let chunkedBodies: [(String, [UInt8])] = [
        ("well-formed", "1\r\nx\r\n0\r\n\r\n"), ("size not hex", "zz\r\nx\r\n0\r\n\r\n"), ("size -1", "-1\r\nx\r\n0\r\n\r\n"),
        ("size 2^64-1", "ffffffffffffffff\r\nx\r\n0\r\n\r\n"), ("size past 2^64", "1ffffffffffffffffff\r\nx\r\n0\r\n\r\n"),
        ("size 2^63-1", "7fffffffffffffff\r\nxxxx"), ("size with extension", "1;a=b\r\nx\r\n0\r\n\r\n"), ("size empty", "\r\nx\r\n0\r\n\r\n"),
        ("chunk longer than its size", "1\r\nxxxxxxxx\r\n0\r\n\r\n"), ("chunk cut short", "a\r\nxx"), ("no last chunk", "1\r\nx\r\n"),
        ("bad trailer", "0\r\nX-A\r\n\r\n"), ("4 MiB + 1 in chunks", String(repeating: "100000\r\n" + String(repeating: "a", count: 1 << 20) + "\r\n", count: 4) + "1\r\na\r\n0\r\n\r\n"),
    ].map { ($0.0, Array($0.1.utf8)) }

    static let ranges = ["bytes=9223372036854775807-", "bytes=9223372036854775808-", "bytes=0-9223372036854775807", "bytes=0-18446744073709551616",
                         "bytes=-9223372036854775807", "bytes=-99999999999999999999", "bytes=-0", "bytes=5-2", "bytes=0-0,1-1", "bytes=-", "bytes=",
                         "bytes=--1", "bytes=1--1", "bytes=+1-+2", "bytes= 1-2", "items=0-1", "garbage",
                         "bytes=" + Array(repeating: "0-1", count: 10_000).joined(separator: ",")]

    /// A checksum no body has: a PATCH that would be accepted is discarded instead, so the
    /// upload stays at its offset for the next case.
    static let wrongChecksum = "Upload-Checksum: sha256 " + Base64.encode(Array(repeating: 0, count: 32))

    /// A random request from the same parts as the table: most often a route as the
    /// table starts from with one to four headers replaced (or repeated) by nasty values,
    /// else any method on any path; a random body; sent whole or cut.
    static func randomCase(_ t: Target, _ rng: inout SeededGenerator) -> Case {
        var method: String, path: String, headers: [String]
        let all = routes(t)
        if Int.random(in: 0..<4, using: &rng) > 0 {
            // A third of these on the routes that compute with a client's numbers.
            let hot = all.filter { ["PATCH", "PUT"].contains($0.0) && !$0.1.contains("watermark") || $0.1.hasPrefix("/v1/contents/\(t.content.hex)") || $0.1 == "/v1/uploads" }
            (method, path, headers) = pick(Int.random(in: 0..<3, using: &rng) == 0 ? hot : all, &rng)
        } else {
            let dead = "/v1/tus/0?hash=\(t.block.hex)&size=\(percent(pick(numbers, &rng)))&expires=\(percent(pick(numbers, &rng)))&sig=\(String(repeating: "0", count: 64))"
            path = pick(["/v1/tus", t.upload, dead, "/v1/blocks/\(t.missing.digest.hex)", "/v1/files?limit=" + percent(pick(numbers, &rng)),
                         "/v1/changes?since=" + percent(pick(numbers, &rng)) + "&limit=" + percent(pick(numbers, &rng)), "/v1/nowhere"], &rng)
            method = pick(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "BREW"], &rng)
            // Not the upload the other requests aim at: it would be gone for the rest of the run.
            if method == "DELETE" && path == t.upload { path = dead }
            headers = Int.random(in: 0..<4, using: &rng) > 0 ? t.auth : []
        }
        var names: [String] = []
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            // Half the time one of the headers that carry numbers: where arithmetic is.
            let name = Bool.random(using: &rng) ? pick(["Content-Length", "Upload-Offset", "Upload-Length", "Range"], &rng) : pick(headerNames, &rng)
            names.append(name)
            if Int.random(in: 0..<4, using: &rng) > 0 { headers.removeAll { $0.lowercased().hasPrefix(name.lowercased() + ":") } }
            headers.append("\(name): \(randomValue(of: name, t, &rng))")
        }
        // The upload stays at its one byte (a PATCH with a wrong checksum is discarded), so
        // that later requests still reach the checks behind its offset.
        if method == "PATCH" && path == t.upload && !headers.contains(where: { $0.hasPrefix("Upload-Checksum:") }) { headers.append(wrongChecksum) }
        let body: [UInt8]
        switch Int.random(in: 0..<4, using: &rng) {
        case 0: body = []
        case 1: body = randomBytes(Int.random(in: 1...3000, using: &rng), seed: rng.next())
        case 2: body = Array(#"{"content":"\#(t.content.hex)","size":\#(pick(numbers, &rng)),"blocks":["\#(t.block.hex)"],"sequence":\#(pick(numbers, &rng))}"#.utf8)
        default: body = Array("1\r\nx\r\n\(pick(["0", "zz", "ffffffffffffffffff", ""], &rng))\r\n\r\n".utf8)
        }
        if !names.contains("Content-Length"), !names.contains("Transfer-Encoding"), Bool.random(using: &rng) { headers.append("Content-Length: \(body.count)") }
        let bytes = request(method, path, host: Int.random(in: 0..<10, using: &rng) == 0 ? nil : "127.0.0.1", headers, body: body)
        let mode: Case.Mode = Int.random(in: 0..<4, using: &rng) == 0 ? .cut(Int.random(in: 1...bytes.count, using: &rng)) : .halfClose
        return Case("\(method) \(path.prefix(50)) \(names.joined(separator: ",")) body \(body.count)", bytes, mode: mode)
    }

    /// The numbers at the edges of Int64 and UInt64, drawn more often than the rest.
    static let extremes = ["9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616"]

    static let headerNames = ["Content-Length", "Upload-Offset", "Upload-Length", "Range", "Upload-Checksum", "Transfer-Encoding", "Tus-Resumable",
                              "Content-Type", "Upload-Metadata", "If-Range", "If-None-Match", "Expect"]

    /// A nasty value for header `name`.
    static func randomValue(of name: String, _ t: Target, _ rng: inout SeededGenerator) -> String {
        switch name {
        case "Range": return Bool.random(using: &rng) ? pick(ranges, &rng) : "bytes=\(pick(extremes + numbers, &rng))-\(pick(extremes + numbers, &rng))"
        case "Upload-Checksum": return pick(["sha256 " + Base64.encode(Array(repeating: 1, count: 32)), "sha256 !", "md5 AAAA", pick(numbers, &rng)], &rng)
        case "Transfer-Encoding": return pick(["chunked", "gzip", "chunked, chunked", "identity", ""], &rng)
        case "Tus-Resumable": return pick(["1.0.0", "0.2.2", ""], &rng)
        case "Content-Type": return pick(["application/offset+octet-stream", "application/json", "text/plain"], &rng)
        case "Upload-Metadata": return "sha256 " + pick([Base64.encode(t.missing.digest.bytes), Base64.encode(Array(t.missing.digest.hex.utf8)), "!!", ""], &rng)
        case "If-Range": return pick(["\"\(t.content.hex)\"", "\"\(t.block.hex)\"", "x"], &rng)
        case "If-None-Match": return pick(["*", "\"\(t.block.hex)\"", ","], &rng)
        case "Expect": return "100-continue"
        // An offset near the upload's (it holds 1 byte) reaches the checks behind the offset's.
        case "Upload-Offset": return Bool.random(using: &rng) ? pick(["0", "1", "2"], &rng) : pick(numbers, &rng)
        default: return pick(Bool.random(using: &rng) ? extremes : numbers, &rng)  // Content-Length, Upload-Length
        }
    }

    static func pick<T>(_ list: [T], _ rng: inout SeededGenerator) -> T { list[Int.random(in: 0..<list.count, using: &rng)] }

    /// A query value as a client would send it (the server percent-decodes it back).
    static func percent(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "=&-._~"))) ?? text
    }
}

// MARK: - The server under test

extension RawHTTPFuzzTests {
    /// A `vdrive serve` process with something on every route: a stored block and the
    /// content of it (recorded at `Camera Roll/stored.jpg` by device `fuzz`), a presigned
    /// tus upload holding its first byte (the state of the reported crash; on a scaled
    /// server, which has no tus uploads, a URL with a wrong signature), and a block the
    /// workspace lacks. `stop()` on every path.
    final class Target {
        let dir = TemporaryDirectory()
        private(set) var weed: SeaweedFS?
        private(set) var server: ServerProcess!
        private(set) var token = ""
        private(set) var block = SHA256Hasher.digest("")
        private(set) var content = SHA256Hasher.digest("")
        private(set) var upload = ""
        private(set) var missing: TestFile!
        private(set) var client: WorkspaceClient!
        /// The case run last, for a report of a server that died a moment after it.
        private var last = "(none)"

        var port: UInt16 { server.port }
        var base: String { server.base }
        var auth: [String] { ["Authorization: Bearer \(token)"] }
        var tusHeaders: [String] { ["Tus-Resumable: 1.0.0", "Content-Type: application/offset+octet-stream"] }

        init(_ backend: Backend) throws {
            do { try start(backend) } catch { stop(); throw error }
        }

        private func start(_ backend: Backend) throws {
            let data = dir.path + "/data"
            var extra: [String] = []
            var database: DatabaseLocation?
            if backend == .scaled {
                database = try Records.postgres.freshLocation()
                let weed = try SeaweedFS(folder: dir.path + "/seaweed")
                self.weed = weed
                writeFile(dir.path + "/s3-credentials", Array("aws_access_key_id = \(weed.accessKey)\naws_secret_access_key = \(weed.secretKey)\n".utf8))
                extra = ["--store", weed.storeURL + "&credentials=" + dir.path + "/s3-credentials"] + Records.arguments(database)
            }
            token = try DeviceRegistry(dataDirectory: data, database: database).add("fuzz")
            server = try ServerProcess(data: data, extra: extra)
            client = WorkspaceClient(baseURL: server.base, token: token)

            let stored = TestFile(in: dir.path, size: 70_000, seed: 1)
            let fd = stored.open()
            defer { close(fd) }
            try client.uploadFile(fd: fd, size: stored.size)
            try client.recordFile(FileRecord(path: "Camera Roll/stored.jpg", hash: stored.content.hex, size: stored.size,
                                             blocks: stored.manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: 1))
            block = stored.digest
            content = stored.content

            let pending = TestFile(in: dir.path, size: 1000, seed: 2)
            missing = pending
            guard case .blocks(let tickets, _) = try client.createUpload(content: pending.content, size: pending.size, blocks: pending.manifest.blocks),
                  let ticket = tickets.first else { throw TestFailure("expected a block to upload") }
            if ticket.kind == .tus {
                let pendingFD = pending.open()
                defer { close(pendingFD) }
                #expect(try client.patch(url: ticket.url, offset: 0, fd: pendingFD, fileOffset: 0, length: 1) == 1)
                upload = String(ticket.url.dropFirst(server.base.count))
            } else {
                upload = "/v1/tus/00000000000000000000000000000000?hash=\(pending.digest.hex)&size=1000&expires=4102444800&sig=\(String(repeating: "0", count: 64))"
            }
        }

        func stop() {
            server?.kill(SIGKILL)
            weed?.stop()
            dir.remove()
        }

        /// Sends a case; fails the test when the server died or answered 5xx. The reply, if any.
        @discardableResult
        func run(_ c: Case) throws -> RawReply? {
            let connection = try RawConnection(port: port)
            var reply: RawReply?
            switch c.mode {
            case .whole:
                connection.send(c.bytes)
                reply = connection.reply(timeout: 5, head: c.head)
                connection.close()
            case .halfClose:
                connection.send(c.bytes)
                connection.finishSending()
                reply = connection.reply(timeout: 2, head: c.head)
                connection.close()
            case .cut(let n):
                connection.send(Array(c.bytes.prefix(n)))
                connection.close(reset: true)
                // The server notices the reset on its connection's thread: give it a moment.
                usleep(20_000)
            }
            // 505 is libmicrohttpd's own answer to an HTTP version it does not speak.
            if let reply, reply.status >= 500, reply.status != 505 {
                Issue.record("\(c.name): answered \(reply.status) \(reply.text.prefix(300))")
            }
            try expectAlive(after: c.name)
            return reply
        }

        /// The process runs and answers GET /v1/health; otherwise the test fails naming the case.
        func expectAlive(after name: String) throws {
            defer { last = name }
            let pid = server.process.processIdentifier
            var answered = false
            if let c = try? RawConnection(port: port) {
                c.send(Array("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8))
                answered = c.reply(timeout: 10)?.status == 200
                c.close()
            }
            if answered && kill(pid, 0) == 0 && server.process.isRunning { return }
            usleep(200_000)  // let Foundation reap it, for the exit status
            let state = server.process.isRunning ? "runs but does not answer /v1/health"
                : "exited (status \(server.process.terminationStatus), \(server.process.terminationReason == .uncaughtSignal ? "signal" : "exit"))"
            Issue.record("vdrive serve \(state) after: \(name) (the case before: \(last))")
            throw TestFailure("the server is down after: \(name)")
        }

        // MARK: requests as bytes

        static func request(_ method: String, _ target: String, host: String? = "127.0.0.1", version: String = "HTTP/1.1", _ headers: [String], body: [UInt8] = []) -> [UInt8] {
            var head = "\(method) \(target) \(version)\r\n"
            if let host { head += "Host: \(host)\r\n" }
            for h in headers { head += h + "\r\n" }
            return Array((head + "\r\n").utf8) + body
        }

        static func json(_ method: String, _ target: String, _ headers: [String], _ text: String) -> [UInt8] {
            request(method, target, headers + ["Content-Type: application/json", "Content-Length: \(text.utf8.count)"], body: Array(text.utf8))
        }
    }

    static func request(_ method: String, _ target: String, host: String? = "127.0.0.1", version: String = "HTTP/1.1", _ headers: [String], body: [UInt8] = []) -> [UInt8] {
        Target.request(method, target, host: host, version: version, headers, body: body)
    }

    static func json(_ method: String, _ target: String, _ headers: [String], _ text: String) -> [UInt8] {
        Target.json(method, target, headers, text)
    }
}
