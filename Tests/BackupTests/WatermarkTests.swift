import Foundation
import Testing
import Crypto
@testable import Backup

@Suite(.tags(.logic)) struct WatermarkTests {
    @Test func oldDatedPhotoCopiedInAfterNewerOnesIsBackedUp() throws {
        let h = try Harness(); defer { h.remove() }
        let worker = h.makeWorker()
        let newer = try h.commit(try Fixtures.bytes("IMG_0002.jpg"), path: "Camera Roll/IMG_0002.jpg")
        _ = try worker.drain()
        let first = try worker.pushWatermark()
        #expect(first == BackupWatermark(sequence: newer.changeSequence, newestCaptureDate: "2026-11-28T09:15:40"))
        #expect(h.server.storedWatermark == first)

        // `cp -p` from an old card: an older capture date and mtime, a later commit.
        let old = try h.commit(try Fixtures.bytes("scan_2001.jpg"), path: "Camera Roll/scan_2001.jpg", mtime: 978_307_200)
        #expect(try worker.updateCursor().sequence == newer.changeSequence)  // not done yet: cursor waits
        _ = try worker.drain()
        #expect(try h.state(old) == .done)
        #expect(h.server.content(old.hash) != nil)
        let second = try #require(try worker.pushWatermark())
        #expect(second.sequence == old.changeSequence)
        // The newest capture date stays the newest, not the latest arrival.
        #expect(second.newestCaptureDate == "2026-11-28T09:15:40")
        #expect(try h.item(old).captureDate == "2001-01-01T08:00:00")
    }

    @Test func aFailedItemHoldsTheCursorBack() throws {
        let h = try Harness(); defer { h.remove() }
        let a = try h.commit(testBytes(100, seed: 30), path: "Camera Roll/a.jpg")
        let b = try h.commit(testBytes(100, seed: 31), path: "Camera Roll/b.jpg")
        let c = try h.commit(testBytes(100, seed: 32), path: "Camera Roll/c.jpg")
        h.server.inject(.forbidden, on: .createUpload)  // a's turn comes first: a fails for good
        // b's record is refused: its blocks are sent, but a content becomes visible on the
        // server only with its record, so b is not done: it retries after a backoff.
        h.server.inject(.refuse, on: .recordFile)
        let worker = h.makeWorker()
        guard case .empty(let due?) = try worker.drain() else { Issue.record("expected a backoff for b"); return }
        #expect(try [a, b, c].map { try h.state($0) } == [.failed, .pending, .done])
        #expect(try worker.updateCursor().sequence == a.changeSequence - 1)
        try h.queue.retryFailed()
        h.clock.advance(due - h.clock.now)
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(try worker.updateCursor().sequence == c.changeSequence)
        #expect(h.server.records.count == 3)
        #expect(h.server.stats.bytesReceived == 300)  // b's blocks were not sent again

        // A linked item whose record is refused is done (the content is there) and its
        // record is pushed by the sync task.
        let known = testBytes(100, seed: 34)
        h.server.store(known)
        let d = try h.commit(known, path: "Camera Roll/d.jpg")
        h.server.inject(.refuse, on: .recordFile)
        _ = try worker.drain()
        #expect(try h.item(d).state == .done)
        #expect(try !h.item(d).recorded)
        _ = try worker.sync()
        #expect(try h.item(d).recorded)
        #expect(h.server.records.count == 4)
    }

    @Test func newDeviceLearnsFromServerAndSendsZeroBytes() throws {
        let h = try Harness(); defer { h.remove() }
        let photos = try ["IMG_0001.jpg", "IMG_0002.jpg", "IMG_0003.jpg", "DSC_1999.jpg"].map { try Fixtures.bytes($0) }
        for bytes in photos { h.server.store(bytes) }  // backed up by this user's previous install
        h.server.setServerWatermark(BackupWatermark(sequence: 4, newestCaptureDate: "2026-11-28T09:15:40"))
        let fresh = try h.commit(testBytes(3000, seed: 33), path: "Camera Roll/new.jpg")
        let copies = try photos.enumerated().map { try h.commit($0.element, path: "Camera Roll/\($0.offset).jpg") }

        let worker = h.makeWorker()
        let report = try worker.sync()
        #expect(report.serverWatermark?.sequence == 4)
        #expect(report.linked == copies.count)
        for c in copies { #expect(try h.item(c).state == .done); #expect(try h.item(c).linked) }
        #expect(try h.state(fresh) == .pending)
        #expect(h.server.stats.bytesReceived == 0)
        #expect(h.server.records.count == copies.count)  // records pushed for the linked ones

        _ = try worker.drain()
        #expect(h.server.stats.bytesReceived == 3000)  // only the new photo
    }

    @Test func learnFromServerAsksInBatches() throws {
        let h = try Harness(); defer { h.remove() }
        var stored: [SHA256Digest] = []
        for i in 0..<25 {
            let bytes = testBytes(64, seed: 100 + UInt64(i))
            if i % 2 == 0 { h.server.store(bytes); stored.append(ContentHash.of(bytes: bytes)) }
            try h.commit(bytes, path: "Camera Roll/\(i).jpg")
        }
        let linked = try h.makeWorker().learnFromServer(batchSize: 4)
        #expect(linked == stored.count)
        #expect(try h.queue.counts().done == stored.count)
        #expect(try h.queue.counts().pending == 25 - stored.count)
    }
}
