import Crypto
@testable import Protocol
@testable import Server
import Testing

/// The checks every client number and header goes through, without a server: they parse
/// what a client may send and never trap (RawHTTPFuzzTests sends the same over sockets).
@Suite(.tags(.logic)) struct UntrustedInputTests {
    @Test func decimalNumbersAreDigitsOnlyAndNeverOverflow() {
        #expect(DecimalNumber(parsing: "0") == .value(0))
        #expect(DecimalNumber(parsing: "007") == .value(7))
        #expect(DecimalNumber(parsing: "9223372036854775807") == .value(.max))
        for tooLarge in ["9223372036854775808", "18446744073709551615", "18446744073709551616", String(repeating: "9", count: 1000)] {
            #expect(DecimalNumber(parsing: tooLarge) == .tooLarge, "\(tooLarge)")
        }
        for malformed in ["", "+1", "-0", "-1", " 1", "1 ", "1.5", "1e3", "0x10", "\u{FF11}", "1,1", "abc"] {
            #expect(DecimalNumber(parsing: malformed) == .malformed, "'\(malformed)'")
        }
    }

    @Test func byteRangesPastInt64AreRangesNotTraps() {
        let size: Int64 = 1000
        let cases: [(String, ByteRange)] = [
            ("bytes=0-99", .range(0, 99)), ("bytes=990-", .range(990, 999)), ("bytes=-10", .range(990, 999)),
            ("bytes=9223372036854775807-", .unsatisfiable), ("bytes=99999999999999999999-", .unsatisfiable),
            ("bytes=0-9223372036854775807", .range(0, 999)), ("bytes=5-99999999999999999999", .range(5, 999)),
            ("bytes=-9223372036854775807", .range(0, 999)), ("bytes=-99999999999999999999", .range(0, 999)),
            ("bytes=-0", .unsatisfiable), ("bytes=-", .unsatisfiable), ("bytes=1000-", .unsatisfiable),
            ("bytes=5-2", .none), ("bytes=0-1,2-3", .none), ("bytes=+1-2", .none), ("bytes=--1", .unsatisfiable), ("items=0-1", .none), ("bytes=1--1", .none),
        ]
        for (header, expected) in cases {
            #expect(ByteRange.parse(header, size: size) == expected, "\(header)")
        }
        #expect(ByteRange.parse("bytes=-99999999999999999999", size: 0) == .unsatisfiable)
    }

    @Test func framingIsOneLengthThatFitsAnInt64() {
        func request(_ headers: [String: String], conflicting: Set<String> = []) -> HTTPRequest {
            HTTPRequest(method: "POST", path: "/v1/files", headers: headers, query: [:], conflicting: conflicting)
        }
        #expect(request(["content-length": "12"]).framingRefusal() == nil)
        #expect(request(["transfer-encoding": "chunked"]).framingRefusal() == nil)
        #expect(request([:]).framingRefusal() == nil)
        let refusals: [(HTTPRequest, Int, String)] = [
            (request(["content-length": "9223372036854775808"]), 413, "Content-Length"),
            (request(["content-length": "-1"]), 400, "Content-Length"),
            (request(["content-length": "abc"]), 400, "Content-Length"),
            (request(["content-length": "0"], conflicting: ["content-length"]), 400, "Content-Length"),
            (request(["content-length": "5", "transfer-encoding": "chunked"]), 400, "Transfer-Encoding"),
            (request(["transfer-encoding": "gzip"]), 400, "Transfer-Encoding"),
        ]
        for (r, status, field) in refusals {
            let reply = r.framingRefusal()
            #expect(reply?.status == status, "\(r.headers)")
            if case .bytes(let body)? = reply?.body { #expect(String(decoding: body, as: UTF8.self).contains("\"field\":\"\(field)\""), "\(r.headers)") }
        }
        // A reply decided at the headers closes the connection unless the body is surely empty.
        #expect(!request(["content-length": "0"]).expectsBody)
        #expect(request(["content-length": "0"], conflicting: ["content-length"]).expectsBody)
        #expect(request(["content-length": "nope"]).expectsBody)
    }

    @Test func hostHeadersAreHostNames() {
        for host in ["127.0.0.1", "127.0.0.1:8420", "example.com", "photos.example.com:443", "[::1]", "[::1]:8420", "[2001:db8::1]:1"] {
            #expect(HTTPRequest.isHost(host), "\(host)")
        }
        for host in ["", String(repeating: "h", count: 300), "a b", "127.0.0.1:99999999999999999999", ":80", "a:", "[::1", "[::1]x", "[]", "host/x", "x\u{0}y", "é.example"] {
            #expect(!HTTPRequest.isHost(host), "\(host)")
        }
    }

    @Test func aJSONNumberNoFieldHoldsIsNamed() throws {
        #expect(WireJSON.unfitNumber(in: Array(#"{"content":"ab","size":18446744073709551616,"blocks":[]}"#.utf8))! == ("size", "18446744073709551616"))
        #expect(WireJSON.unfitNumber(in: Array(#"{"a":1,"b":[1,2e400]}"#.utf8))! == ("b", "2e400"))
        #expect(WireJSON.unfitNumber(in: Array(#"{"sequence":1.5}"#.utf8))! == ("sequence", "1.5"))
        #expect(WireJSON.unfitNumber(in: Array(#"{"s":"99999999999999999999\"9","n":-9223372036854775808,"m":1e3}"#.utf8)) == nil)
        let body = Array(#"{"content":"ab","size":9223372036854775808,"blocks":[]}"#.utf8)
        do {
            _ = try WireJSON.decode(CreateUploadRequest.self, from: body)
            Issue.record("2^63 decoded as an Int64")
        } catch {
            let (field, message) = WireJSON.describe(error, body: body)
            #expect(field == "size")
            #expect(message.contains("whole number") && message.contains("9223372036854775808"), "\(message)")
        }
    }

    @Test func treeValuesAreCheckedBeforeUse() throws {
        let id = String(repeating: "0f", count: 16), root = TreeNode.rootID
        func put(id: String = id, base: Int64 = 0, parent: String = root, name: String = "a", kind: TreeNodeKind = .folder, hash: String? = nil,
                 size: Int64? = nil, mtime: Int64 = 1, target: String? = nil) -> TreeChange {
            .put(TreePut(id: id, base: base, parent: parent, name: name, kind: kind, hash: hash, size: size, mtime: mtime, target: target))
        }
        let empty = ContentHash.of(blocks: []).hex
        // What the document states: 400 (.invalid), naming the field.
        let invalid: [(TreeChange, String)] = [
            (put(id: ""), "id"), (put(id: String(id.dropLast())), "id"), (put(id: id.uppercased()), "id"), (put(id: String(repeating: "g", count: 32)), "id"),
            (put(id: id + "0"), "id"), (put(parent: "../" + String(id.dropFirst(3))), "parent"), (put(base: -1), "base"), (put(base: .min), "base"),
            (put(name: ""), "name"), (put(name: "a/b"), "name"), (put(name: "/"), "name"), (put(name: ".."), "name"), (put(name: "."), "name"),
            (put(name: "a\u{0}b"), "name"), (put(name: String(repeating: "n", count: 256)), "name"),
            (put(mtime: -1), "mtime"), (put(mtime: (1 << 62) + 1), "mtime"), (put(mtime: .max), "mtime"),
            (put(kind: .file, hash: empty, size: -1), "size"), (put(kind: .file, hash: empty, size: .max), "size"), (put(kind: .file, hash: "xyz", size: 0), "hash"),
            (put(kind: .symlink, target: ""), "target"), (put(kind: .symlink, target: String(repeating: "t", count: 4097)), "target"),
            (put(kind: .symlink, target: "a\u{0}"), "target"), (.delete(id: "x", base: 0), "id"), (.delete(id: id, base: -5), "base"),
        ]
        for (change, field) in invalid {
            #expect(throws: ValidationError.self, "\(change)") { try Validation.treeChange(change) }
            do { _ = try Validation.treeChange(change) } catch {
                #expect(error.kind == .invalid && error.field == field && !error.message.isEmpty, "\(change): \(error)")
            }
        }
        // What only the server can say: the change's own 422 (.inconsistent).
        let inconsistent: [(TreeChange, String)] = [
            (put(name: String(repeating: "é", count: 128)), "name"), (put(kind: .symlink, target: String(repeating: "é", count: 2049)), "target"),
            (put(id: root), "id"), (.delete(id: root, base: 0), "id"), (put(kind: .file), "hash"), (put(kind: .file, hash: empty), "size"),
            (put(kind: .folder, hash: empty), "hash"), (put(kind: .symlink), "target"), (put(kind: .symlink, size: 1, target: "t"), "size"),
            (put(kind: .file, hash: empty, size: 0, target: "t"), "target"),
        ]
        for (change, field) in inconsistent {
            do { _ = try Validation.treeChange(change); Issue.record("\(change) passed") } catch {
                #expect(error.kind == .inconsistent && error.field == field && error.code == "invalid", "\(change): \(error)")
            }
        }
        // The edges that pass.
        for change in [put(name: String(repeating: "n", count: 255)), put(name: String(repeating: "é", count: 127)), put(mtime: 1 << 62), put(mtime: 0),
                       put(kind: .symlink, target: String(repeating: "t", count: 4096)), put(base: .max), put(name: "...")] {
            #expect(throws: Never.self, "\(change)") { try Validation.treeChange(change) }
        }
        #expect(try Validation.treeChange(put(kind: .file, hash: empty.uppercased(), size: 0)) == .put(
            TreePut(id: id, base: 0, parent: root, name: "a", kind: .file, hash: empty, size: 0, mtime: 1, executable: false), manifest: nil))
        for restore in [TreeRestoreRequest.ids([]), .ids(Array(repeating: id, count: 1001)), .ids([id, "x"]), .under("x", since: 0), .under(id, since: -1)] {
            #expect(throws: ValidationError.self, "\(restore)") { try Validation.treeRestore(restore) }
        }
    }

    @Test func restoredNamesKeepTheExtensionCountOnAndFit() {
        #expect(TreeNames.restored("note.txt", kind: .file, attempt: 1) == "note (restored).txt")
        #expect(TreeNames.restored("note.txt", kind: .file, attempt: 2) == "note (restored 2).txt")
        #expect(TreeNames.restored("note (restored).txt", kind: .file, attempt: 2) == "note (restored 2).txt")
        #expect(TreeNames.restored("note (restored 2).txt", kind: .file, attempt: 3) == "note (restored 3).txt")
        #expect(TreeNames.restored("Docs.old", kind: .folder, attempt: 1) == "Docs.old (restored)")
        #expect(TreeNames.restored(".bashrc", kind: .file, attempt: 1) == ".bashrc (restored)")
        #expect(TreeNames.restored("archive.", kind: .file, attempt: 1) == "archive. (restored)")
        for name in [String(repeating: "n", count: 255), String(repeating: "é", count: 127) + "x", String(repeating: "n", count: 240) + ".txt",
                     "a." + String(repeating: "e", count: 250)] {
            for attempt in [1, 2, 1000] {
                let restored = TreeNames.restored(name, kind: .file, attempt: attempt)
                #expect(restored.utf8.count <= 255 && restored.contains("(restored") && String(validating: Array(restored.utf8), as: UTF8.self) != nil, "\(restored)")
            }
        }
        #expect(TreeNames.restored(String(repeating: "n", count: 251) + ".txt", kind: .file, attempt: 1).hasSuffix(" (restored).txt"))
    }

    @Test func anUploadLifetimeSaturates() {
        let configuration = ServerConfiguration(dataDirectory: "/nonexistent", uploadExpiry: .max)
        #expect(configuration.uploadExpires(after: 1_800_000_000) == .max)
        #expect(ServerConfiguration(dataDirectory: "/nonexistent", uploadExpiry: 60).uploadExpires(after: 100) == 160)
    }
}
