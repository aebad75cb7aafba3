import Client
import Foundation
import HTTPClient
import Protocol
import Server
import Testing
import TestSupport
import TestTraits

/// The tree's feed carrying a device's cursor in the backup records' feed
/// (`GET /v1/tree?since=T&wait=S&records_since=R`): one held request that wakes for
/// either feed, so an idle device holds one request on the server, not two.
@Suite(.tags(.endToEnd), .serialized) struct CarriedFeedTests {
    /// Held while neither feed moves; a record made meanwhile answers it, with no nodes and
    /// the records' new end; a request naming that end is held again, and a tree change
    /// answers it with the node.
    @Test(arguments: Records.all) func aHeldTreeRequestWakesForARecordAndForATreeChange(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let (f, before, tree) = try Self.oneRecord(s, seed: 1)

        let poll = try Self.poll(s, since: tree, wait: 30, recordsSince: before)
        try eventually("the tree request is held", within: 10) { s.server.heldRequests == 1 }
        let record = try s.record(f, at: "Camera Roll/b.jpg", sequence: 2)
        let reply = try #require(poll.reply(timeout: 10), "the held tree request was not answered within 10 s of a record")
        #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
        let page = try WireJSON.decode(TreePage.self, from: reply.body)
        #expect(page.nodes.isEmpty && page.next == tree)
        #expect(page.recordsLatest == record.sequence, "the records' feed now ends at the new record")
        #expect(s.server.heldRequests == 0)

        let again = try Self.poll(s, since: tree, wait: 30, recordsSince: try #require(page.recordsLatest))
        try eventually("the next tree request is held", within: 10) { s.server.heldRequests == 1 }
        let folder = TreeNode.rootID.replacingOccurrences(of: "0", with: "a")
        let made = try s.client.applyTreeChanges([.put(TreePut(id: folder, base: 0, parent: TreeNode.rootID, name: "Docs", kind: .folder, mtime: 1_000))])
        #expect(made.first?.status == 201)
        let second = try #require(again.reply(timeout: 10), "the held tree request was not answered within 10 s of a tree change")
        let withNode = try WireJSON.decode(TreePage.self, from: second.body)
        #expect(withNode.nodes.map(\.id) == [folder])
        #expect(withNode.recordsLatest == page.recordsLatest, "the records did not move")
    }

    /// A cursor in the records' feed other than its end is answered at once: behind it
    /// (records to read), or past it (a reset server, which the device learns at once).
    /// Without `records_since` the answer names no records' end.
    @Test(arguments: Records.all) func anotherRecordsEndIsAnsweredAtOnce(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let (_, latest, tree) = try Self.oneRecord(s, seed: 2)
        for cursor in [latest - 1, latest + 10] {
            let page = try s.client.treePage(since: tree, wait: 30, recordsSince: cursor)
            #expect(page.nodes.isEmpty && page.recordsLatest == latest, "records_since=\(cursor)")
        }
        #expect(s.server.heldRequests == 0, "answered, not held")
        #expect(try s.client.treePage(since: tree).recordsLatest == nil)
    }

    /// `records_since` is a number like the others: out of bounds or not digits is 400
    /// naming it, and nothing is held.
    @Test func untrustedRecordsSinceIsRefused() throws {
        let s = try TestServer()
        defer { s.stop() }
        for bad in ["-1", "abc", "1e3", "%2B5", "99999999999999999999999", "", "0x10", "5%00"] {
            let reply = try s.send("GET", API.tree + "?since=0&wait=30&records_since=\(bad)")
            #expect(reply.status == 400, "records_since=\(bad) answered \(reply.status)")
            #expect(reply.error?.field == "records_since", "records_since=\(bad): \(reply.text)")
        }
        #expect(s.server.heldRequests == 0)
    }

    /// Two server processes on one PostgreSQL: a tree request held by one, carrying the
    /// records' cursor, is answered when a backup is recorded through the other (NOTIFY
    /// at its commit, LISTEN in the first).
    @Test(.enabled(if: PostgresCluster.isInstalled)) func aRecordThroughAnotherProcessWakesAHeldTreeRequest() throws {
        let s = try TestServer(records: .postgres)
        defer { s.stop() }
        let other = try LongPollTests.secondProcess(of: s)
        defer { other.kill(SIGTERM) }
        let viaOther = WorkspaceClient(baseURL: other.base, token: s.token)
        let tree = try s.client.treePage(since: 0).latest
        for round in 1...3 {
            let latest = try s.client.changesPage(since: 0).latestSequence ?? 0
            let poll = try Self.poll(s, since: tree, wait: 60, recordsSince: latest)
            try eventually("the tree request is held", within: 10) { s.server.heldRequests == 1 }
            try LongPollTests.record(through: viaOther, in: s, seed: UInt64(40 + round), at: "Camera Roll/other-\(round).jpg")
            let reply = try #require(poll.reply(timeout: 10), "a tree request held by process 1 was not answered within 10 s of a record through process 2")
            let page = try WireJSON.decode(TreePage.self, from: reply.body)
            #expect(page.nodes.isEmpty)
            #expect((page.recordsLatest ?? 0) > latest, "round \(round): the records' end \(String(describing: page.recordsLatest)), before \(latest)")
        }
    }

    /// A backup recorded (`Camera Roll/<seed>.jpg`): its file, its sequence (the records'
    /// end) and the tree's end.
    static func oneRecord(_ s: TestServer, seed: UInt64) throws -> (file: TestFile, records: Int64, tree: Int64) {
        let f = try s.uploaded(size: 1000, seed: seed)
        let sequence = try s.record(f, at: "Camera Roll/\(seed).jpg").sequence ?? 0
        return (f, sequence, try s.client.treePage(since: 0).latest)
    }

    /// `GET /v1/tree?since=&wait=&records_since=` sent on a connection of its own; read its reply later.
    static func poll(_ s: TestServer, since: Int64, wait: Int, recordsSince: Int64) throws -> RawConnection {
        let c = try RawConnection(port: s.server.port)
        c.send(Array("GET \(API.tree)?since=\(since)&wait=\(wait)&records_since=\(recordsSince) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(s.auth)\r\n\r\n".utf8))
        return c
    }
}
