import Client
import Crypto
import Foundation
import Protocol
import Server
import Synchronization
import Testing
import TestTraits

/// The workspace tree on the server (Docs/sync.md): every outcome of a change, pages
/// that never send a child before its parent, the trash, versions, a seeded random run
/// of several devices checked against the tree's invariants, and content put through
/// the tree and read back by another device. On SQLite and on PostgreSQL (records); the
/// content round trip also with blocks in SeaweedFS.
@Suite(.tags(.endToEnd), .serialized) struct TreeTests {
    /// A server and two devices of one workspace, `laptop` and `phone`.
    final class Workspace: @unchecked Sendable { // set up once, then only read
        let server: TestServer
        let laptop: WorkspaceClient
        let phone: WorkspaceClient

        init(_ records: Records, store: BlockStoreChoice = .folder) throws {
            server = try TestServer(store: store, records: records)
            do {
                let configuration = server.server.configuration
                let token = try DeviceRegistry(dataDirectory: configuration.dataDirectory, database: configuration.database).add("phone")
                laptop = server.client
                phone = WorkspaceClient(baseURL: server.base, token: token)
            } catch { server.stop(); throw error }
        }

        func stop() { server.stop() }

        /// Every node as it is now, read from the feed from 0.
        func everything(limit: Int = API.maxTreePage) throws -> [String: TreeNode] {
            var nodes: [String: TreeNode] = [:]
            var since: Int64 = 0
            while true {
                let page = try laptop.treePage(since: since, limit: limit)
                for node in page.nodes { nodes[node.id] = node }
                if page.next == since { return nodes }
                since = page.next
            }
        }
    }

    static func newID() -> String { Hex.encode((0..<16).map { _ in UInt8.random(in: 0...255) }) }
    static let root = TreeNode.rootID
    /// The empty content: known to every workspace once recorded, needs no block.
    static let empty = ContentHash.of(blocks: []).hex

    static func folder(_ id: String, in parent: String = root, _ name: String, base: Int64 = 0) -> TreeChange {
        .put(TreePut(id: id, base: base, parent: parent, name: name, kind: .folder, mtime: 1_000))
    }

    static func file(_ id: String, in parent: String = root, _ name: String, base: Int64 = 0, content: TestFile? = nil, blocks: Bool = true,
                     mtime: Int64 = 2_000) -> TreeChange {
        .put(TreePut(id: id, base: base, parent: parent, name: name, kind: .file, hash: content?.content.hex ?? empty, size: content?.size ?? 0,
                     blocks: blocks ? content?.manifest.blocks.map(\.hex) ?? [] : nil, mtime: mtime))
    }

    /// Applies one change and returns its result.
    static func one(_ client: WorkspaceClient, _ change: TreeChange) throws -> TreeResult {
        try #require(try client.applyTreeChanges([change]).first)
    }

    // MARK: outcomes

    @Test(arguments: Records.all) func appliedThenAlreadySoNothingTwice(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let docs = Self.newID(), note = Self.newID()
        let created = try w.laptop.applyTreeChanges([Self.folder(docs, "Docs"), Self.file(note, in: docs, "note.txt")])
        #expect(created.map(\.status) == [201, 201], "\(created)")
        let noteNode = try #require(created[1].node)
        #expect(noteNode.parent == docs && noteNode.name == "note.txt" && noteNode.hash == Self.empty && noteNode.device == "test-device")
        #expect(created[0].node!.version < noteNode.version)

        // Sent again (a device killed before it saw the answer): already so, no new version.
        let again = try w.laptop.applyTreeChanges([Self.folder(docs, "Docs"), Self.file(note, in: docs, "note.txt")])
        #expect(again.map(\.status) == [200, 200])
        #expect(again[1].node == noteNode)
        let latest = try w.laptop.treePage(since: 0).latest
        #expect(latest == noteNode.version)

        // A rename with the current base applies, with a new version.
        let renamed = try Self.one(w.phone, Self.file(note, in: docs, "renamed.txt", base: noteNode.version))
        #expect(renamed.status == 200 && renamed.node?.name == "renamed.txt" && renamed.node?.device == "phone")
        #expect(renamed.node!.version == latest + 1)

        // A delete, then the same delete again: already so.
        let deleted = try Self.one(w.laptop, .delete(id: note, base: renamed.node!.version))
        #expect(deleted.status == 200 && deleted.node?.deleted == true && deleted.node?.deletedBy == "test-device")
        let deletedAgain = try Self.one(w.laptop, .delete(id: note, base: renamed.node!.version))
        #expect(deletedAgain.status == 200 && deletedAgain.node == deleted.node)
        #expect(try w.laptop.treePage(since: 0).latest == deleted.node!.version)
    }

    @Test(arguments: Records.all) func conflictsNameTheCurrentNode(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let a = Self.newID(), b = Self.newID(), f = Self.newID()
        _ = try w.laptop.applyTreeChanges([Self.folder(a, "A"), Self.folder(b, "B"), Self.file(f, "f.txt")])
        let nodes = try w.everything()

        // The phone renames f; the laptop, still at f's first version, moves it: conflict with the current node.
        let renamed = try Self.one(w.phone, Self.file(f, "g.txt", base: nodes[f]!.version))
        let stale = try Self.one(w.laptop, Self.file(f, in: a, "f.txt", base: nodes[f]!.version))
        #expect(stale.status == 409 && stale.error == "conflict" && stale.node == renamed.node, "\(stale)")
        // A delete with a stale base too.
        let staleDelete = try Self.one(w.laptop, .delete(id: f, base: nodes[f]!.version))
        #expect(staleDelete.status == 409 && staleDelete.error == "conflict" && staleDelete.node == renamed.node)
        // A create of an id that exists, or a base for an id that does not.
        #expect(try Self.one(w.laptop, Self.folder(a, "Other")).error == "conflict")
        let unknown = try Self.one(w.laptop, Self.file(Self.newID(), "x", base: 7))
        #expect(unknown.status == 409 && unknown.error == "conflict" && unknown.node == nil)

        // Name taken: the node in the way comes back.
        let taken = try Self.one(w.laptop, Self.folder(Self.newID(), "A"))
        #expect(taken.status == 409 && taken.error == "name_taken" && taken.node?.id == a, "\(taken)")
        let takenByMove = try Self.one(w.laptop, Self.folder(b, "A", base: nodes[b]!.version))
        #expect(takenByMove.error == "name_taken" && takenByMove.node?.id == a)

        // Kind never changes.
        let kind = try Self.one(w.laptop, Self.file(a, "A", base: nodes[a]!.version))
        #expect(kind.status == 409 && kind.error == "kind_conflict" && kind.node?.kind == .folder)

        // Parent unknown, or not a folder.
        #expect(try Self.one(w.laptop, Self.file(Self.newID(), in: Self.newID(), "orphan")).error == "parent_missing")
        let underFile = try Self.one(w.laptop, Self.file(Self.newID(), in: f, "inside-a-file"))
        #expect(underFile.status == 409 && underFile.error == "parent_missing" && underFile.field == "parent")

        // A folder with a live child cannot go; once the child went, it can.
        let child = Self.newID()
        let childNode = try #require(try Self.one(w.phone, Self.file(child, in: a, "child")).node)
        let notEmpty = try Self.one(w.laptop, .delete(id: a, base: nodes[a]!.version))
        #expect(notEmpty.status == 409 && notEmpty.error == "not_empty" && notEmpty.node?.id == a)
        #expect(try Self.one(w.laptop, .delete(id: child, base: childNode.version)).status == 200)
        #expect(try Self.one(w.laptop, .delete(id: a, base: nodes[a]!.version)).status == 200)
        try Self.expectInvariants(try w.everything())
    }

    /// Folder A into B from one device and B into A from another, sequentially and at
    /// once: one is applied, the other refused as a cycle, and the tree has none.
    @Test(arguments: Records.all) func crossedMovesFromTwoDevicesLeaveNoCycle(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        for round in 0..<8 {
            let a = Self.newID(), b = Self.newID()
            let made = try w.laptop.applyTreeChanges([Self.folder(a, "A\(round)"), Self.folder(b, "B\(round)")])
            let (va, vb) = (made[0].node!.version, made[1].node!.version)
            var results: [TreeResult] = []
            if round == 0 {
                results.append(try Self.one(w.laptop, Self.folder(a, in: b, "A\(round)", base: va)))
                results.append(try Self.one(w.phone, Self.folder(b, in: a, "B\(round)", base: vb)))
            } else {
                let both = Mutex<[TreeResult]>([])
                DispatchQueue.concurrentPerform(iterations: 2) { i in
                    let r = i == 0 ? try? Self.one(w.laptop, Self.folder(a, in: b, "A\(round)", base: va))
                                   : try? Self.one(w.phone, Self.folder(b, in: a, "B\(round)", base: vb))
                    if let r { both.withLock { $0.append(r) } }
                }
                results = both.withLock { $0 }
            }
            let statuses = results.map { "\($0.status) \($0.error ?? "")" }.sorted()
            #expect(statuses == ["200 ", "409 cycle"], "round \(round): \(statuses)")
        }
        try Self.expectInvariants(try w.everything())
    }

    /// One batch that moves folders between puts of files: each change is decided on the
    /// tree as the changes before it in the batch left it (a folder moved under another
    /// makes the next move a cycle), and each result's node is the row as stored.
    @Test(arguments: Records.all) func oneBatchSeesItsOwnFolderMoves(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let a = Self.newID(), b = Self.newID(), f1 = Self.newID(), f2 = Self.newID()
        let made = try w.laptop.applyTreeChanges([Self.folder(a, "A"), Self.folder(b, "B")])
        let (va, vb) = (try #require(made[0].node?.version), try #require(made[1].node?.version))
        let results = try w.laptop.applyTreeChanges([
            Self.file(f1, in: b, "one.txt"),
            Self.folder(b, in: a, "B", base: vb),
            Self.file(f2, in: b, "two.txt"),
            Self.folder(a, in: b, "A", base: va),
        ])
        let statuses = results.map { "\($0.status) \($0.error ?? "")" }
        #expect(statuses == ["201 ", "200 ", "201 ", "409 cycle"], "\(statuses)")
        let stored = try w.everything()
        #expect(stored[f2]?.parent == b && stored[b]?.parent == a && stored[a]?.parent == Self.root)
        for result in results.prefix(3) {
            let node = try #require(result.node)
            #expect(stored[node.id] == node, "the answer is the row as stored: \(node) against \(String(describing: stored[node.id]))")
        }
        try Self.expectInvariants(stored)
    }

    @Test(arguments: Records.all) func contentIsCheckedAsForFileRecords(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let content = TestFile(in: w.server.dir.path, size: Blocks.size + 5000, seed: 41)
        let id = Self.newID()
        let withoutBlocks = try Self.one(w.laptop, Self.file(id, "big.bin", content: content, blocks: false))
        #expect(withoutBlocks.status == 409 && withoutBlocks.error == "content_missing")
        let missing = try Self.one(w.laptop, Self.file(id, "big.bin", content: content))
        #expect(missing.status == 409 && missing.error == "missing_blocks")
        #expect(Set(missing.missing ?? []) == Set(content.manifest.blocks.map(\.hex)))
        #expect(try w.everything().isEmpty, "a refused put writes nothing")

        // Upload through the existing path, put again: created, and the content is known.
        let fd = content.open(); defer { close(fd) }
        try w.laptop.uploadFile(fd: fd, size: content.size)
        let put = try Self.one(w.laptop, Self.file(id, "big.bin", content: content))
        #expect(put.status == 201 && put.node?.size == content.size && put.node?.hash == content.content.hex, "\(put)")
        // Another node of the same content needs no blocks; another size is a size conflict.
        #expect(try Self.one(w.phone, Self.file(Self.newID(), "copy.bin", content: content, blocks: false)).status == 201)
        let wrongSize = try Self.one(w.phone, .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "odd.bin", kind: .file,
                                                            hash: content.content.hex, size: 7, mtime: 1)))
        #expect(wrongSize.status == 409 && wrongSize.error == "size_conflict")
        // A conflict is said before the content's absence.
        let other = TestFile(in: w.server.dir.path, size: 3000, seed: 42)
        let conflicting = try Self.one(w.phone, Self.file(id, "big.bin", base: put.node!.version + 100, content: other))
        #expect(conflicting.error == "conflict", "\(conflicting)")
    }

    @Test(arguments: Records.all) func aPutIntoATrashedFolderBringsItBackAloneAndEditWinsOverDelete(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let top = Self.newID(), docs = Self.newID(), old = Self.newID(), keep = Self.newID()
        let made = try w.laptop.applyTreeChanges([Self.folder(top, "Top"), Self.folder(docs, in: top, "Docs"),
                                                  Self.file(old, in: docs, "old.txt"), Self.file(keep, "keep.txt")])
        // The laptop deletes Docs as rm -r does (contents first), then Top.
        let nodes = Dictionary(uniqueKeysWithValues: made.compactMap(\.node).map { ($0.id, $0) })
        for (id, version) in [(old, nodes[old]!.version), (docs, nodes[docs]!.version), (top, nodes[top]!.version)] {
            #expect(try Self.one(w.laptop, .delete(id: id, base: version)).status == 200)
        }
        // A name now taken where Top was: Top comes back as "Top (restored)".
        let newTop = try #require(try Self.one(w.laptop, Self.folder(Self.newID(), "Top")).node)

        // The phone, which never saw the delete, adds a file to Docs: Docs and Top come back, old.txt does not.
        let added = try Self.one(w.phone, Self.file(Self.newID(), in: docs, "added.txt"))
        #expect(added.status == 201, "\(added)")
        let after = try w.everything()
        #expect(after[docs]?.deleted == false && after[top]?.deleted == false)
        #expect(after[top]?.name == "Top (restored)" && after[newTop.id]?.name == "Top")
        #expect(after[old]?.deleted == true, "the folder's other children stay in the trash")
        #expect(after[top]!.version < after[docs]!.version && after[docs]!.version < added.node!.version, "ancestors first, each a new version")

        // Edit wins over delete: a put with the deleted node's current version brings it back with the new state.
        let oldDeleted = after[old]!
        let edited = try Self.one(w.phone, Self.file(old, in: docs, "old.txt", base: oldDeleted.version, mtime: 9_000))
        #expect(edited.status == 200 && edited.node?.deleted == false && edited.node?.mtime == 9_000, "\(edited)")
        // A put on a deleted node with an older base is a conflict naming the deleted node.
        let keepNode = after[keep]!
        let gone = try #require(try Self.one(w.laptop, .delete(id: keep, base: keepNode.version)).node)
        let late = try Self.one(w.phone, Self.file(keep, "keep.txt", base: keepNode.version, mtime: 3))
        #expect(late.status == 409 && late.error == "conflict" && late.node == gone)
        try Self.expectInvariants(try w.everything())
    }

    @Test(arguments: Records.all) func trashListsRestoresWithRestoredNamesAndKeepsVersions(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let docs = Self.newID(), note = Self.newID(), other = Self.newID()
        let v1 = TestFile(in: w.server.dir.path, name: "v1", bytes: Array("first\n".utf8))
        let v2 = TestFile(in: w.server.dir.path, name: "v2", bytes: Array("second\n".utf8))
        for f in [v1, v2] { let fd = f.open(); defer { close(fd) }; try w.laptop.uploadFile(fd: fd, size: f.size) }
        let made = try w.laptop.applyTreeChanges([Self.folder(docs, "Docs"), Self.file(note, in: docs, "note.txt", content: v1),
                                                  Self.file(other, in: docs, "other.txt")])
        let second = try #require(try Self.one(w.laptop, Self.file(note, in: docs, "note.txt", base: made[1].node!.version, content: v2)).node)
        // Versions: both contents, oldest first; a move adds none.
        let moved = try #require(try Self.one(w.laptop, Self.file(note, in: docs, "note2.txt", base: second.version, content: v2)).node)
        var versions = try w.phone.nodeVersions(id: note)
        #expect(versions.map(\.hash) == [v1.content.hex, v2.content.hex] && versions.map(\.device) == ["test-device", "test-device"])
        #expect(versions.map(\.sequence) == [made[1].node!.version, second.version])
        // Making the old one current is a put of its hash, without blocks: a new version, history kept.
        let back = try #require(try Self.one(w.phone, Self.file(note, in: docs, "note2.txt", base: moved.version, content: v1, blocks: false)).node)
        versions = try w.phone.nodeVersions(id: note)
        #expect(versions.map(\.hash) == [v1.content.hex, v2.content.hex, v1.content.hex] && versions.last?.device == "phone")
        #expect(try w.phone.nodeVersions(id: docs).isEmpty)
        #expect(throws: ClientError.notFound) { try w.phone.nodeVersions(id: Self.newID()) }

        // Delete both files, then Docs; the trash lists them newest first, with their paths.
        let start = Int64(time(nil))
        let otherNode = try w.everything()[other]!
        _ = try w.laptop.applyTreeChanges([.delete(id: note, base: back.version), .delete(id: other, base: otherNode.version)])
        _ = try Self.one(w.laptop, .delete(id: docs, base: made[0].node!.version))
        let trash = try w.phone.trash()
        #expect(trash.trash.map(\.node.id) == [docs, other, note] && trash.next == nil)
        #expect(trash.trash.map(\.path) == ["Docs", "Docs/other.txt", "Docs/note2.txt"])
        let firstPage = try w.phone.trash(limit: 2)
        #expect(firstPage.trash.count == 2 && firstPage.next != nil)
        #expect(try w.phone.trash(after: firstPage.next, limit: 2).trash.map(\.node.id) == [note])

        // Someone makes a new Docs and a new note2.txt in it; restoring the old note brings
        // the old Docs back as "Docs (restored)", and the note keeps its name there.
        let newDocs = Self.newID()
        _ = try w.laptop.applyTreeChanges([Self.folder(newDocs, "Docs"), Self.file(Self.newID(), in: newDocs, "note2.txt")])
        let restored = try w.phone.restore(ids: [note])
        #expect(restored.nodes.map(\.id) == [docs, note] && restored.skipped.isEmpty, "\(restored)")
        #expect(restored.nodes.map(\.name) == ["Docs (restored)", "note2.txt"])
        #expect(restored.nodes.allSatisfy { !$0.deleted && $0.device == "phone" })
        // A second restore of it is skipped, and so is an unknown id.
        let again = try w.phone.restore(ids: [note, Self.newID()])
        #expect(again.nodes.isEmpty && again.skipped.map(\.error) == ["not_deleted", "unknown"])

        // Name taken inside the restored folder: a new other.txt, then the old one comes back under since.
        _ = try Self.one(w.laptop, Self.file(Self.newID(), in: docs, "other.txt"))
        let under = try w.laptop.restore(under: docs, since: start)
        #expect(under.nodes.map(\.id) == [other] && under.nodes.first?.name == "other (restored).txt", "\(under)")
        // Again with the name taken twice.
        let otherNow = try w.everything()[other]!
        _ = try Self.one(w.laptop, .delete(id: other, base: otherNow.version))
        _ = try Self.one(w.laptop, Self.file(Self.newID(), in: docs, "other (restored).txt"))
        #expect(try w.laptop.restore(ids: [other]).nodes.first?.name == "other (restored 2).txt")
        #expect(try w.laptop.restore(under: docs, since: start + 100_000).nodes.isEmpty, "nothing deleted since then")
        try Self.expectInvariants(try w.everything())
    }

    @Test(arguments: Records.all) func changesBreakingARuleAreRefusedAlone(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let long = String(repeating: "é", count: 200)  // 200 characters, 400 bytes: fits the document, not the rule
        let results = try w.laptop.applyTreeChanges([
            Self.folder(Self.newID(), long),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "nohash", kind: .file, mtime: 1)),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "dir", kind: .folder, hash: Self.empty, mtime: 1)),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "link", kind: .symlink, mtime: 1)),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "link", kind: .symlink, mtime: 1, target: String(repeating: "ü", count: 3000))),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "blocks", kind: .file, hash: Self.empty, size: 0, blocks: [Self.empty], mtime: 1)),
            Self.folder(Self.root, "root"),
            .delete(id: Self.root, base: 0),
            .put(TreePut(id: Self.newID(), base: 0, parent: Self.root, name: "ok-link", kind: .symlink, mtime: 1, target: "../elsewhere")),
        ])
        #expect(results.map(\.status) == [422, 422, 422, 422, 422, 422, 422, 422, 201], "\(results)")
        #expect(results.map { $0.field ?? "" } == ["name", "hash", "hash", "target", "target", "blocks", "id", "id", ""])
        #expect(results.prefix(8).allSatisfy { $0.error == "invalid" && $0.message?.isEmpty == false })
        #expect(results.last?.node?.target == "../elsewhere" && results.last?.node?.executable == nil)

        // A change that breaks the document refuses the whole request, and nothing is applied.
        let before = try w.laptop.treePage(since: 0).latest
        let bad = try w.server.json("POST", API.treeChanges, """
            {"changes": [{"op": "put", "id": "\(Self.newID())", "base": 0, "parent": "\(Self.root)", "name": "fine", "kind": "folder", "mtime": 1},
                         {"op": "put", "id": "\(Self.newID())", "base": 0, "parent": "\(Self.root)", "name": "a/b", "kind": "folder", "mtime": 1}]}
            """)
        #expect(bad.status == 400 && bad.error?.field == "changes.1.name", "\(bad.text)")
        #expect(try w.laptop.treePage(since: 0).latest == before)
    }

    // MARK: pages

    /// A folder moved after its child was created has a version above the child's; a
    /// page limit that splits them still sends the folder first. And nodes between the
    /// page and the folder are not skipped.
    @Test(arguments: Records.all) func pagesNeverSendAChildBeforeItsParent(_ records: Records) throws {
        let w = try Workspace(records); defer { w.stop() }
        let a = Self.newID(), b = Self.newID(), c = Self.newID(), x = Self.newID(), y = Self.newID()
        let made = try w.laptop.applyTreeChanges([Self.folder(a, "A"), Self.folder(b, in: a, "B"), Self.file(c, in: b, "c.txt"),
                                                  Self.file(x, "x.txt"), Self.file(y, "y.txt")])
        // Move A under a new folder N and rename B: both get versions above c, x and y.
        let n = Self.newID()
        _ = try w.laptop.applyTreeChanges([Self.folder(n, "N"), Self.folder(a, in: n, "A", base: made[0].node!.version),
                                           Self.folder(b, in: a, "B2", base: made[1].node!.version)])
        let everything = try w.everything()
        for limit in 1...8 {
            var mirror: [String: TreeNode] = [:]
            var since: Int64 = 0
            var pages = 0
            while true {
                let page = try w.phone.treePage(since: since, limit: limit)
                try Self.apply(page.nodes, to: &mirror, context: "limit \(limit), since \(since)")
                if page.next == since { break }
                #expect(page.next > since)
                since = page.next
                pages += 1
                if pages > 100 { Issue.record("limit \(limit): no end"); break }
            }
            #expect(mirror == everything, "limit \(limit): the pages add up to the tree")
        }
        // Moved and renamed, A and B now have versions above c's: the first page of one
        // node is c, with N, A and B2 ahead of it; `next` is c's version, so x and y follow.
        let first = try w.phone.treePage(since: 0, limit: 1)
        #expect(first.nodes.map(\.id) == [n, a, b, c] && first.next == made[2].node!.version, "\(first.nodes.map(\.name))")
        #expect(try w.phone.treePage(since: first.next, limit: 1).nodes.map(\.id) == [x])
    }

    @Test func waitIsParsedAndAnsweredAtOnceForNow() throws {
        let w = try Workspace(.sqlite); defer { w.stop() }
        let page = try w.laptop.treePage(since: 0, wait: 2)
        #expect(page.nodes.isEmpty && page.next == 0 && page.latest == 0 && page.workspace.count == 32)
        for bad in ["61", "-1", "9223372036854775808", "1.5", "x"] {
            let r = try w.server.send("GET", API.tree + "?wait=" + bad)
            #expect(r.status == 400 && r.error?.field == "wait", "wait=\(bad): \(r.text)")
        }
    }

    // MARK: many devices

    /// Devices with views of their own (refreshed at random) create, move, rename, edit,
    /// delete and restore at random, from threads at once; conflicts are expected. The
    /// tree then keeps every invariant, and a device replaying the feed in small pages
    /// never sees a child before its parent or a cycle.
    @Test(arguments: Records.all) func seededRandomDevicesKeepTheInvariants(_ records: Records) throws {
        let seed = ProcessInfo.processInfo.environment["VDRIVE_TREE_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        print("TreeTests: seed \(seed) (\(records)); replay with VDRIVE_TREE_SEED=\(seed)")
        let w = try Workspace(records); defer { w.stop() }
        let configuration = w.server.server.configuration
        let registry = try DeviceRegistry(dataDirectory: configuration.dataDirectory, database: configuration.database)
        let clients = [w.laptop, w.phone] + (try (0..<2).map { WorkspaceClient(baseURL: w.server.base, token: try registry.add("device-\($0)")) })
        let contents = try (0..<3).map { try w.server.uploaded(size: 100 + $0 * 1000, seed: 900 + UInt64($0)) }
        let tally = Mutex<[String: Int]>([:])
        let failure = Mutex<String?>(nil)
        DispatchQueue.concurrentPerform(iterations: clients.count) { d in
            var rng = SeededGenerator(seed: seed &+ UInt64(d) &* 7919)
            var view: [String: TreeNode] = [:]
            var since: Int64 = 0
            do {
                for step in 0..<(records == .sqlite ? 150 : 80) {
                    if step % 10 == 0 || Int.random(in: 0..<6, using: &rng) == 0 {
                        while true {
                            let page = try clients[d].treePage(since: since, limit: 50)
                            for node in page.nodes { view[node.id] = node }
                            if page.next == since { break }
                            since = page.next
                        }
                    }
                    let change = Self.randomChange(view, contents: contents, &rng)
                    let result = try Self.one(clients[d], change)
                    tally.withLock { $0["\(result.status) \(result.error ?? "")", default: 0] += 1 }
                    if let node = result.node { view[node.id] = node }
                    if result.status >= 500 || result.error == "invalid" { throw TestFailure("\(change) answered \(result)") }
                }
            } catch {
                failure.withLock { $0 = "device \(d), seed \(seed): \(error)" }
            }
        }
        if let message = failure.withLock({ $0 }) { Issue.record("\(message)") }
        print("TreeTests: outcomes \(tally.withLock { $0 }.sorted { $0.key < $1.key })")
        let everything = try w.everything()
        try Self.expectInvariants(everything)
        #expect(everything.values.filter { !$0.deleted }.count > 10, "the run built something")
        for limit in [1, 3, 17] {
            var mirror: [String: TreeNode] = [:]
            var since: Int64 = 0
            while true {
                let page = try w.phone.treePage(since: since, limit: limit)
                try Self.apply(page.nodes, to: &mirror, context: "seed \(seed), limit \(limit), since \(since)")
                if page.next == since { break }
                since = page.next
            }
            #expect(mirror == everything, "seed \(seed), limit \(limit)")
        }
    }

    static func randomChange(_ view: [String: TreeNode], contents: [TestFile], _ rng: inout SeededGenerator) -> TreeChange {
        let live = view.values.filter { !$0.deleted }.sorted { $0.version < $1.version }
        let folders = [root] + live.filter { $0.kind == .folder }.map(\.id)
        let names = ["a", "b", "c", "Docs", "notes.txt", "x"]
        func pick<T>(_ list: [T]) -> T { list[Int.random(in: 0..<list.count, using: &rng)] }
        let content = pick(contents)
        let roll = Int.random(in: 0..<10, using: &rng)
        let files = live.filter { $0.kind == .file }
        let gone = view.values.filter(\.deleted).sorted { $0.version < $1.version }.last
        if (4...8).contains(roll) && live.isEmpty || roll == 6 && files.isEmpty || roll == 9 && gone?.kind != .file {
            return folder(newID(), in: pick(folders), pick(names))
        }
        switch roll {
        case 0, 1:
            return folder(newID(), in: pick(folders), pick(names))
        case 2, 3:
            return file(newID(), in: pick(folders), pick(names), content: content)
        case 4, 5:
            // A move or a rename of a node as this device last saw it.
            let node = pick(live)
            return .put(TreePut(id: node.id, base: node.version, parent: pick(folders), name: pick(names), kind: node.kind, hash: node.hash,
                                size: node.size, mtime: node.mtime, executable: node.executable, target: node.target))
        case 6:
            let node = pick(files)
            return file(node.id, in: node.parent, node.name, base: node.version, content: content, mtime: node.mtime + 1)
        case 7, 8:
            let node = pick(live)
            return .delete(id: node.id, base: node.version)
        default:
            // Edit wins over delete: a put on a node this device saw deleted.
            let node = gone!
            return file(node.id, in: node.parent, node.name, base: node.version, content: content)
        }
    }

    // MARK: content through the tree

    /// A file put with blocks sent through the upload path (tus, or presigned S3 PUTs),
    /// then read back by hash by another device that learnt of it from the feed.
    @Test(arguments: Backend.allCases) func contentPutThroughTheTreeReadsBackOnAnotherDevice(_ backend: Backend) throws {
        let store = backend == .scaled ? try ScaledStoreTests.Store() : nil
        defer { store?.stop() }
        let w = try Workspace(backend == .scaled ? .postgres : .sqlite, store: store?.choice ?? .folder); defer { w.stop() }
        let f = TestFile(in: w.server.dir.path, size: 2 * Blocks.size + 12_345, seed: 77)
        let fd = f.open(); defer { close(fd) }
        try w.laptop.uploadFile(fd: fd, size: f.size)
        let docs = Self.newID(), id = Self.newID()
        let results = try w.laptop.applyTreeChanges([Self.folder(docs, "Docs"), Self.file(id, in: docs, "movie.bin", content: f)])
        #expect(results.map(\.status) == [201, 201], "\(results)")

        let page = try w.phone.treePage(since: 0)
        let node = try #require(page.nodes.first { $0.id == id })
        #expect(page.nodes.map(\.id) == [docs, id] && node.size == f.size)
        let out = w.server.dir.path + "/read-back"
        let outFD = open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600); defer { close(outFD) }
        try w.phone.download(content: try #require(SHA256Digest(hex: node.hash ?? "")), to: outFD)
        #expect(FileManager.default.contents(atPath: out).map { Array($0) } == f.bytes)
        #expect(try w.phone.contentBlocks(f.content).blocks == f.manifest.blocks)
    }

    // MARK: checks

    /// Applies a page as a device would, in order: every node's parent is there first
    /// (the root, or a node already applied), and no node ever ends up its own ancestor.
    static func apply(_ nodes: [TreeNode], to mirror: inout [String: TreeNode], context: String) throws {
        for node in nodes {
            guard node.parent == root || mirror[node.parent] != nil else {
                throw TestFailure("\(context): node \(node.id) '\(node.name)' came before its parent \(node.parent)")
            }
            mirror[node.id] = node
            var seen: Set<String> = [node.id]
            var up = node.parent
            while up != root {
                guard seen.insert(up).inserted, let next = mirror[up] else {
                    throw TestFailure("\(context): applying \(node.id) '\(node.name)' made a cycle (or a missing parent at \(up))")
                }
                up = next.parent
            }
        }
    }

    /// The tree's invariants over every node: one parent that exists; a live node's
    /// parent is a live folder; live names unique per folder; no folder its own ancestor.
    static func expectInvariants(_ nodes: [String: TreeNode]) throws {
        var names: [String: String] = [:]
        for node in nodes.values {
            #expect(node.id != root)
            #expect(node.parent == root || nodes[node.parent] != nil, "\(node.id)'s parent \(node.parent) is unknown")
            if !node.deleted {
                if node.parent != root {
                    let parent = nodes[node.parent]
                    #expect(parent?.kind == .folder && parent?.deleted == false, "live \(node.id) '\(node.name)' is in \(parent.map { "\($0.kind) deleted=\($0.deleted)" } ?? "nothing")")
                }
                let key = node.parent + "/" + node.name
                #expect(names[key] == nil, "two live nodes named '\(node.name)' in \(node.parent)")
                names[key] = node.id
                #expect(node.kind != .file || node.hash != nil)
            }
            var seen: Set<String> = [node.id]
            var up = node.parent
            while up != root, let next = nodes[up] {
                guard seen.insert(up).inserted else { Issue.record("cycle through \(node.id)"); break }
                up = next.parent
            }
        }
    }
}
