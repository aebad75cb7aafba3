import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// Several blocks and items in flight: the same outcomes as one at a time.
@Suite(.tags(.logic)) struct PipelineTests {
    @Test func severalPhotosInFlightAreEachSentOnce() throws {
        let h = try Harness(); defer { h.remove() }
        let photos = (0..<8).map { testBytes(3_000_000, seed: 300 + UInt64($0)) }
        let commits = try photos.enumerated().map { try h.commit($0.element, path: "Camera Roll/\($0.offset).jpg") }
        let link = LinkTransport(h.server, rtt: 0.02, bytesPerSecond: 30e6)  // 100 ms per photo on the link
        var outcomes: [UploadOutcome] = []
        #expect(try h.makeWorker(blocksInFlight: 4, transport: link).drain { _, o in outcomes.append(o) } == .empty(nextDue: nil))
        #expect(outcomes == Array(repeating: .sent, count: 8))
        for (c, bytes) in zip(commits, photos) {
            #expect(try h.state(c) == .done)
            #expect(h.server.content(c.hash) == bytes)
        }
        #expect(h.server.stats.bytesReceived == Int64(8 * 3_000_000))
        #expect(link.maxPatchesInFlight > 1 && link.maxPatchesInFlight <= 4)
    }

    @Test func blocksOfOneFileGoInParallel() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(24 * MiB + 99, seed: 310)
        let c = try h.commit(bytes, path: "Camera Roll/long.mov")
        let link = LinkTransport(h.server, rtt: 0.02, bytesPerSecond: 400e6)
        #expect(try h.makeWorker(blocksInFlight: 4, transport: link).drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
        #expect(link.maxPatchesInFlight == 4)
        #expect(try h.item(c).captureDate != nil)
    }

    /// Items sharing content or blocks with one in flight wait for it: nothing twice.
    @Test func sharedContentWaitsForTheItemInFlight() throws {
        let h = try Harness(); defer { h.remove() }
        let a = testBytes(10 * MiB, seed: 320)
        let b = Array(a[0..<(8 * MiB)]) + testBytes(MiB, seed: 321)
        try h.commit(a, path: "Camera Roll/a.mov")
        try h.commit(a, path: "Camera Roll/a copy.mov")
        try h.commit(b, path: "Camera Roll/b.mov")
        var outcomes: [UploadOutcome] = []
        _ = try h.makeWorker(blocksInFlight: 4).drain { _, o in outcomes.append(o) }
        #expect(outcomes == [.sent, .linked, .sent])
        #expect(h.server.stats.bytesReceived == Int64(10 * MiB + MiB))
    }

    /// Holes are not shared content: two sparse files travel together.
    @Test func filesSharingOnlyZeroBlocksTravelTogether() throws {
        let h = try Harness(); defer { h.remove() }
        let hole = [UInt8](repeating: 0, count: Blocks.size)
        try h.commit(hole + testBytes(3 * MiB, seed: 325), path: "Camera Roll/s1.raw")
        try h.commit(hole + testBytes(3 * MiB, seed: 326), path: "Camera Roll/s2.raw")
        let link = LinkTransport(h.server, rtt: 0.02, bytesPerSecond: 30e6)
        _ = try h.makeWorker(blocksInFlight: 4, transport: link).drain()
        #expect(h.server.records.count == 2)
        #expect(h.server.stats.bytesReceived == Int64(6 * MiB))
        #expect(link.maxPatchesInFlight == 2)
    }

    /// One block fails for good (a damaged local copy): its siblings in flight are
    /// cancelled, the item fails, and the items around it go on.
    @Test func aBadBlockFailsItsItemOnlyWithOthersInFlight() throws {
        let h = try Harness(); defer { h.remove() }
        let bad = try h.commit(testBytes(16 * MiB, seed: 330), path: "Camera Roll/bad.mov")
        let good = try h.commit(testBytes(6 * MiB, seed: 331), path: "Camera Roll/good.mov")
        try corrupt(h.blobs.path(for: bad.blocks[1]), at: 77)
        _ = try h.makeWorker(blocksInFlight: 4).drain()
        #expect(try h.state(bad) == .failed)
        #expect(try h.item(bad).failureReason?.contains("block 1") == true)
        #expect(h.server.content(bad.hash) == nil)
        #expect(try h.state(good) == .done)
        #expect(h.server.records.count == 1)
    }

    /// A transient error on one block: the attempt ends (after its siblings return) and
    /// the retry sends only what the server does not hold.
    @Test func aDroppedBlockRetriesWithoutResendingTheOthers() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(16 * MiB, seed: 340)
        let c = try h.commit(bytes, path: "Camera Roll/drop.mov")
        h.server.inject(.dropAfter(bytes: MiB), on: .patch)
        let worker = h.makeWorker(blocksInFlight: 4)
        guard case .empty(let due?) = try worker.drain() else { Issue.record("expected a backoff"); return }
        h.clock.advance(due - h.clock.now)
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))  // nothing twice
    }

    /// Reading once holds with senders on their own threads (counted for the process).
    @Test func eachByteIsReadOnceWithBlocksInFlight() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(20 * MiB, seed: 350)
        let c = try h.commit(bytes, path: "Camera Roll/20MiB.mov")
        let worker = h.makeWorker(blocksInFlight: 4)
        let before = try processReadBytes()
        _ = try worker.drain()
        let read = try processReadBytes() - before
        #expect(try h.state(c) == .done)
        let ratio = Double(read) / Double(bytes.count)
        #expect(ratio >= 1.0 && ratio <= 1.05, "read \(read) bytes to upload \(bytes.count)")
    }
}

/// Bytes read by this whole process (`rchar` in /proc/self/io): the senders' threads too.
func processReadBytes() throws -> Int64 {
    let text = try String(contentsOfFile: "/proc/self/io", encoding: .utf8)
    let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("rchar:") })
    return try #require(Int64(line.dropFirst("rchar:".count).trimmingCharacters(in: .whitespaces)))
}
