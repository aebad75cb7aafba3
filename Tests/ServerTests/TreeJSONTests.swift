import Foundation
import Protocol
import Testing

/// The tree's bodies written by `JSONWriter` and read by `JSONReader` are the JSON their
/// `Codable` conformances write and read, both ways, and bad input is an error, never a trap.
@Suite(.tags(.logic)) struct TreeJSONTests {
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
        mutating func maybe() -> Bool { below(2) == 0 }
        mutating func int() -> Int64 {
            switch below(4) {
            case 0: return Int64.max - Int64(below(3))
            case 1: return Int64.min + Int64(below(3))
            default: return Int64(bitPattern: next()) >> below(63)
            }
        }
        mutating func text() -> String {
            let pieces = ["a", "Z", "é", "照片", "🙂", "\"", "\\", "/", "\n", "\t", "\u{0}", "\u{1F}", "\u{7F}", " ", "\u{2028}", "IMG_0001.jpg"]
            return (0..<below(6)).map { _ in pieces[below(pieces.count)] }.joined()
        }
        mutating func node() -> TreeNode {
            TreeNode(id: text(), parent: text(), name: text(), kind: TreeNodeKind.allCases[below(3)], hash: maybe() ? text() : nil,
                     size: maybe() ? int() : nil, mtime: int(), executable: maybe() ? maybe() : nil, target: maybe() ? text() : nil,
                     version: int(), deleted: maybe(), deletedAt: maybe() ? int() : nil, deletedBy: maybe() ? text() : nil,
                     device: text(), changedAt: int(), blocks: maybe() ? (0..<below(4)).map { _ in text() } : nil)
        }
    }

    static func foundationEncode<T: Encodable>(_ value: T) throws -> [UInt8] {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys]
        return Array(try e.encode(value))
    }

    @Test func pagesAndResultsRoundTripWithFoundationBothWays() throws {
        let seed = testSeed()
        print("TreeJSONTests seed \(seed)")
        var r = Random(state: seed)
        for _ in 0..<200 {
            let page = TreePage(nodes: (0..<r.below(5)).map { _ in r.node() }, next: r.int(), latest: r.int(), workspace: r.text(),
                                recordsLatest: r.maybe() ? r.int() : nil)
            let written = WireJSON.encode(page)
            #expect(try JSONDecoder().decode(TreePage.self, from: Data(written)) == page, "seed \(seed)")
            #expect(try WireJSON.decode(TreePage.self, from: try Self.foundationEncode(page)) == page, "seed \(seed)")
            #expect(written == (try Self.foundationEncode(page)).map { $0 }.replacingEscapedSlashes(), "seed \(seed)")

            let results = TreeChangesResponse(results: (0..<r.below(4)).map { _ in
                TreeResult(status: r.below(600), node: r.maybe() ? r.node() : nil, error: r.maybe() ? r.text() : nil,
                           message: r.maybe() ? r.text() : nil, field: r.maybe() ? r.text() : nil, missing: r.maybe() ? [r.text()] : nil)
            })
            #expect(try JSONDecoder().decode(TreeChangesResponse.self, from: Data(WireJSON.encode(results))) == results, "seed \(seed)")
            #expect(try WireJSON.decode(TreeChangesResponse.self, from: try Self.foundationEncode(results)) == results, "seed \(seed)")
        }
    }

    @Test func aBatchOfChangesIsWhatTheServerDecodes() throws {
        let seed = testSeed()
        print("TreeJSONTests seed \(seed)")
        var r = Random(state: seed)
        let changes: [TreeChange] = (0..<300).map { _ in
            if r.below(4) == 0 { return .delete(id: r.text(), base: r.int()) }
            return .put(TreePut(id: r.text(), base: r.int(), parent: r.text(), name: r.text(), kind: TreeNodeKind.allCases[r.below(3)],
                                hash: r.maybe() ? r.text() : nil, size: r.maybe() ? r.int() : nil, blocks: r.maybe() ? [r.text(), r.text()] : nil,
                                mtime: r.int(), executable: r.maybe() ? r.maybe() : nil, target: r.maybe() ? r.text() : nil))
        }
        let body = WireJSON.encode(TreeChangesRequest(changes: changes))
        // The server reads it with the strict Codable decoder.
        #expect(try WireJSON.decode(TreeChangesRequest.self, from: body).changes == changes, "seed \(seed)")
    }

    @Test func nullOptionalsAreNilAndUnknownMembersAreSkipped() throws {
        let body = #"{"latest":9,"next":3,"future":{"a":[1,2.5e3,true,null,"x"]},"nodes":[{"id":"i","parent":"p","name":"n\u00e9\ud83d\ude42","kind":"file","#
            + #""hash":null,"size":null,"mtime":-5,"version":0,"deleted":false,"device":"d","changedAt":1,"blocks":null,"extra":"\/"}],"workspace":"w"}"#
        let page = try WireJSON.decode(TreePage.self, from: Array(body.utf8))
        #expect(page.nodes.count == 1)
        #expect(page.nodes[0].name == "né🙂")
        #expect(page.nodes[0].hash == nil && page.nodes[0].size == nil && page.nodes[0].blocks == nil)
        #expect(page.nodes[0].mtime == -5)
        #expect(page.recordsLatest == nil)
        #expect(try JSONDecoder().decode(TreePage.self, from: Data(body.utf8)) == page)
    }

    @Test(arguments: [
        (#"{"results":[{"status":9223372036854775808}]}"#, "outside"),
        (#"{"results":[{"status":-9223372036854775809}]}"#, "outside"),
        (#"{"results":[{"status":1.5}]}"#, "whole number"),
        (#"{"results":[{"status":1e3}]}"#, "whole number"),
        (#"{"results":[{"status":012}]}"#, "leading zero"),
        (#"{"results":[{"status":-}]}"#, "expected a number"),
        (#"{"results":[{"status":200,"error":"\ud800"}]}"#, "surrogate"),
        (#"{"results":[{"status":200,"error":"\udc00x"}]}"#, "surrogate"),
        (#"{"results":[{"status":200,"error":"\q"}]}"#, "escape"),
        (#"{"results":[{"status":200,"error":"\u12"}]}"#, "escape"),
        (#"{"results":[{"status":200}]} x"#, "after the JSON value"),
        (#"{"results":[{"status":200}]"#, "expected"),
        (#"{"results":[{"status":200,}]}"#, "member's name"),
        (#"{"results":[{}]}"#, "missing field 'status'"),
        (#"{"results":[{"status":200,"node":{"id":"a"}}]}"#, "missing field"),
        (#"{"results":[{"status":200,"node":{"kind":"pipe"}}]}"#, "kind"),
        (#"{"results":[{"status":true}]}"#, "expected a number"),
        (#"{"results":"#, "expected"),
        ("", "expected"),
    ])
    func badInputIsAnErrorThatSaysWhat(_ body: String, _ words: String) {
        do {
            _ = try WireJSON.decode(TreeChangesResponse.self, from: Array(body.utf8))
            Issue.record("decoded \(body)")
        } catch {
            #expect("\(error)".contains(words), "\(error)")
        }
    }

    @Test func controlCharactersInvalidUTF8AndDeepNestingAreRefused() {
        let control: [UInt8] = Array(#"{"results":[{"status":200,"error":"a"#.utf8) + [0x01] + Array(#""}]}"#.utf8)
        let notUTF8: [UInt8] = Array(#"{"results":[{"status":200,"error":"a"#.utf8) + [0xC3, 0x28] + Array(#""}]}"#.utf8)
        let deep = Array((#"{"results":[{"status":200,"x":"# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}]}").utf8)
        for body in [control, notUTF8, deep] {
            #expect(throws: JSONReader.Failure.self) { try WireJSON.decode(TreeChangesResponse.self, from: body) }
        }
    }

    /// Every prefix and many one-byte changes of a valid body: decoded or refused, never a trap.
    @Test func mangledBodiesNeverTrap() throws {
        let seed = testSeed()
        print("TreeJSONTests seed \(seed)")
        var r = Random(state: seed)
        let page = TreePage(nodes: (0..<3).map { _ in r.node() }, next: 1, latest: 2, workspace: "w")
        let body = WireJSON.encode(page)
        for n in 0..<body.count { _ = try? WireJSON.decode(TreePage.self, from: Array(body[0..<n])) }
        let alphabet = Array(#"{}[]",:0123456789-.eE\u"tfn "#.utf8) + [0x00, 0x80, 0xFF]
        for _ in 0..<5_000 {
            var mangled = body
            mangled[r.below(mangled.count)] = alphabet[r.below(alphabet.count)]
            _ = try? WireJSON.decode(TreePage.self, from: mangled)
        }
    }
}

/// The server's reading of a batch of changes: as strict as the `Codable` conformance,
/// never more lenient, and every refusal names the member.
@Suite(.tags(.logic)) struct TreeChangesReadingTests {
    static let id = String(repeating: "0f", count: 16)
    static func put(_ extra: String, name: String = #""a""#) -> String {
        #"{"changes":[{"op":"put","id":"\#(id)","base":0,"parent":"\#(TreeNode.rootID)","name":\#(name),"mtime":1\#(extra)}]}"#
    }

    @Test(arguments: [
        (put(#","kind":"folder","colour":"red""#), "changes.0.colour", "unknown field 'colour'"),
        (put(#","kind":"file","hash":null,"size":0"#), "changes.0.hash", "not null"),
        (put(#","kind":"device""#), "changes.0.kind", "kind must be file, folder or symlink"),
        (put(#","kind":"folder""#, name: "7"), "changes.0.name", "must be a string"),
        (put(#","kind":"folder""#, name: "null"), "changes.0.name", "not null"),
        (put(#","kind":"file","size":9223372036854775808"#), "changes.0.size", "whole number"),
        (put(#","kind":"file","size":1.5"#), "changes.0.size", "whole number"),
        (put(#","kind":"file","blocks":["a",7]"#), "changes.0.blocks.1", "must be a string"),
        (put(#","kind":"file","executable":1"#), "changes.0.executable", "true or false"),
        (put(""), "changes.0.kind", "missing field 'changes.0.kind'"),
        (#"{"changes":[{"op":"delete","id":"\#(id)","base":0,"name":"a"}]}"#, "changes.0.name", "unknown field 'name'"),
        (#"{"changes":[{"op":"move","id":"\#(id)","base":0}]}"#, "changes.0.op", "op must be put or delete"),
        (#"{"changes":[{"id":"\#(id)","base":0}]}"#, "changes.0.op", "missing field"),
        (#"{"changes":[{"op":"delete","id":"\#(id)"}]}"#, "changes.0.base", "missing field"),
        (#"{"changes":[7]}"#, "changes.0", "must be an object"),
        (#"{"changes":{}}"#, "changes", "must be an array"),
        (#"{"changes":[],"more":1}"#, "more", "unknown field 'more'"),
        (#"{}"#, "changes", "missing field"),
    ])
    func refusalsNameTheMember(_ body: String, _ field: String, _ words: String) {
        do {
            let request = try WireJSON.decode(TreeChangesRequest.self, from: Array(body.utf8))
            Issue.record("decoded \(request)")
        } catch {
            let (f, message) = WireJSON.describe(error, body: Array(body.utf8))
            #expect(f == field && message.contains(words), "\(f ?? "-"): \(message)")
        }
        #expect(throws: (any Error).self) { try JSONDecoder().decode(TreeChangesRequest.self, from: Data(body.utf8)) }
    }

    @Test(arguments: ["", "[", "7x", #"{"changes":[}"#, #"{"changes":[{"op":"put""#, #"{"changes":[]} {}"#, #"{"changes":[{"op":"put",}]}"#])
    func brokenBodiesAreNotJSON(_ body: String) {
        do {
            _ = try WireJSON.decode(TreeChangesRequest.self, from: Array(body.utf8))
            Issue.record("decoded \(body)")
        } catch {
            #expect(WireJSON.describe(error).message.contains("JSON"), "\(error)")
        }
    }

    /// Mangled batches: whatever this reader accepts, JSONDecoder accepts as the same changes.
    @Test func neverMoreLenientThanTheCodableDecoder() throws {
        let seed = testSeed()
        print("TreeChangesReadingTests seed \(seed)")
        var r = TreeJSONTests.Random(state: seed)
        let body = Array((#"{"changes":[{"op":"delete","id":"\#(Self.id)","base":12},"#
            + #"{"op":"put","id":"\#(Self.id)","base":0,"parent":"p","name":"n\u00e9","kind":"file","hash":"h","size":10,"blocks":["b"],"mtime":-1,"executable":true,"target":"t"}]}"#).utf8)
        let alphabet = Array(#"{}[]",:0123456789-.eE\u"tfnul "#.utf8) + [0x00, 0x01, 0x80, 0xC3, 0xFF]
        var accepted = 0
        for _ in 0..<20_000 {
            var mangled = body
            for _ in 0...r.below(2) { mangled[r.below(mangled.count)] = alphabet[r.below(alphabet.count)] }
            guard let mine = try? WireJSON.decode(TreeChangesRequest.self, from: mangled) else { continue }
            accepted += 1
            let theirs = try? JSONDecoder().decode(TreeChangesRequest.self, from: Data(mangled))
            #expect(theirs?.changes == mine.changes, "seed \(seed): \(String(decoding: mangled, as: UTF8.self))")
        }
        #expect(accepted > 0)
    }
}

private extension Array where Element == UInt8 {
    /// JSONEncoder writes `/` as `\/`; JSONWriter leaves it as it is (both are JSON).
    func replacingEscapedSlashes() -> [UInt8] {
        var out: [UInt8] = []
        var i = 0
        while i < count {
            if self[i] == UInt8(ascii: "\\"), i + 1 < count {
                if self[i + 1] == UInt8(ascii: "/") { out.append(UInt8(ascii: "/")); i += 2; continue }
                out.append(self[i]); out.append(self[i + 1]); i += 2; continue
            }
            out.append(self[i]); i += 1
        }
        return out
    }
}
