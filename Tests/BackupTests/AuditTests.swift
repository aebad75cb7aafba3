import Foundation
import Testing
import Crypto
@testable import Backup

/// The sync's audit: versions the queue counts as done that the server no longer holds.
@Suite(.tags(.logic)) struct AuditTests {
    /// The server is reset (an empty one at the same address): the sync finds the done
    /// versions it lacks and queues them again, and the next drain sends them. A version
    /// whose blocks are gone here (the photo deleted since) has nothing to send: it stays.
    @Test func doneVersionsTheServerLostAreSentAgain() throws {
        let h = try Harness(); defer { h.remove() }
        let kept = try h.commit(testBytes(3000, seed: 40), path: "Camera Roll/kept.jpg")
        let deleted = try h.commit(testBytes(2000, seed: 41), path: "Camera Roll/deleted.jpg")
        _ = try h.makeWorker().drain()
        #expect(try h.state(kept) == .done)
        #expect(try h.state(deleted) == .done)
        #expect(try h.makeWorker().sync().requeued == 0, "the server holds both")

        for d in deleted.blocks { try FileManager.default.removeItem(atPath: h.blobs.path(for: d)) }
        let reset = InMemoryTransport()
        reset.setNow(h.clock.now)
        let worker = h.makeWorker(transport: reset)
        #expect(try worker.sync().requeued == 1)
        #expect(try h.state(kept) == .pending)
        #expect(try h.item(kept).lastError?.contains("no longer holds") == true)
        #expect(try h.state(deleted) == .done)

        _ = try worker.drain()
        #expect(try h.state(kept) == .done)
        #expect(reset.content(kept.hash) != nil)
        #expect(reset.records.count == 1)
        #expect(try worker.sync().requeued == 0)
    }

    /// Pages of `batchSize` items: every page is asked, none twice.
    @Test func theAuditAsksPageByPage() throws {
        let h = try Harness(); defer { h.remove() }
        let photos = (0..<9).map { testBytes(64, seed: 200 + UInt64($0)) }
        let commits = try photos.enumerated().map { try h.commit($0.element, path: "Camera Roll/\($0.offset).jpg") }
        _ = try h.makeWorker().drain()
        let reset = InMemoryTransport()
        for p in photos.prefix(4) { reset.store(p) }
        #expect(try h.makeWorker(transport: reset).auditDone(batchSize: 2) == 5)
        #expect(try commits.map { try h.state($0) } == Array(repeating: .done, count: 4) + Array(repeating: .pending, count: 5))
    }
}
