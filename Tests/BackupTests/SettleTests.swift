import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// A version committed while a writable handle stays open (an importer that
/// forks mid-write commits at each child's close) is queued unsettled and never sent;
/// the last release settles it.
@Suite(.tags(.logic)) struct SettleTests {
    @Test func anUnsettledVersionWaitsUntilSettled() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(3000, seed: 60)
        let c = try h.commit(bytes, path: "Camera Roll/partial.jpg", settled: false)
        #expect(try h.queue.nextDue(now: .infinity) == nil)
        #expect(try h.queue.earliestDue() == nil)
        let worker = h.makeWorker()
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(h.server.stats.creates == 0 && h.server.stats.bytesReceived == 0)

        // What the user sees: waiting, with the reason; listed as "writing".
        #expect(try h.queue.counts() == BackupQueue.Counts(writing: 1, bytesLeft: 3000))
        let status = try worker.status(.resting)
        #expect(status.state == .waiting)
        #expect(status.waitingCode == "writing")
        #expect(status.line == "Waiting for 1 file still being written · 1 item (3.0 KB) left")
        let listed = try #require(try h.queue.listing(.pending).first)
        #expect(listed.item.isWriting && listed.item.shownState == "writing")
        #expect(try h.queue.fileState(hash: c.hash)?.shownState == "writing")
        #expect(try worker.updateCursor().sequence == 0)  // not backed up: the cursor waits

        #expect(try BackupQueue.settle(in: h.db, inode: c.inode) == 1)
        #expect(try h.queue.fileState(hash: c.hash)?.shownState == "pending")
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.content(c.hash) == bytes)
        #expect(try worker.status(.resting).state == .idle)
    }

    /// A shell importer's case: `exec 3> partial.jpg`, five `head -c 2000000 /dev/urandom >&3`
    /// (each child's close commits 2, 4, 6, 8 and 10 MB), `exec 3>&-`. One version, the
    /// last, is sent, its bytes once.
    @Test func fiveIntermediateCommitsThenSettleSendOnlyTheLastVersionOnce() throws {
        let h = try Harness(); defer { h.remove() }
        let photo = testBytes(10_000_000, seed: 61)
        var last: CameraRollCommit?
        for n in 1...5 {
            last = try h.commit(Array(photo[0..<(n * 2_000_000)]), path: "Camera Roll/partial.jpg", inode: 900, settled: false)
            #expect(try h.makeWorker().drain() == .empty(nextDue: nil))  // the engine wakes after each commit
        }
        let final = try #require(last)
        #expect(try h.queue.allItems().map(\.changeSequence) == [final.changeSequence])  // listed once
        #expect(h.server.stats.bytesReceived == 0)

        try BackupQueue.settle(in: h.db, inode: 900)  // `exec 3>&-`: the last writable release
        #expect(try h.makeWorker().drain() == .empty(nextDue: nil))
        #expect(try h.state(final) == .done)
        #expect(h.server.stats.bytesReceived == 10_000_000)
        #expect(h.server.records.count == 1)
        #expect(h.server.records[final.changeSequence]?.size == 10_000_000)
        #expect(h.server.content(final.hash) == photo)
    }

    @Test func settleTouchesOnlyItsInodeAndSettleAllEverything() throws {
        let h = try Harness(); defer { h.remove() }
        let a = try h.commit(testBytes(100, seed: 62), path: "Camera Roll/a.jpg", inode: 1, settled: false)
        let b = try h.commit(testBytes(100, seed: 63), path: "Camera Roll/b.jpg", inode: 2, settled: false)
        let c = try h.commit(testBytes(100, seed: 64), path: "Camera Roll/c.jpg", inode: 3, settled: false)
        #expect(try BackupQueue.settle(in: h.db, inode: 2) == 1)
        #expect(try h.queue.nextDue(now: .infinity)?.changeSequence == b.changeSequence)
        #expect(try BackupQueue.settle(in: h.db, inode: 2) == 0)  // already settled
        // At mount no handle can be open: every version is what its file holds now.
        #expect(try BackupQueue.settleAll(in: h.db) == 2)
        #expect(try h.queue.counts() == BackupQueue.Counts(pending: 3, bytesLeft: 300))
        _ = try h.makeWorker().drain()
        #expect(try [a, b, c].map { try h.state($0) } == [.done, .done, .done])
    }

    /// The server already holding an unsettled version's content must not turn it into a
    /// file record: that record would name a partial file.
    @Test func learningFromTheServerLeavesUnsettledVersionsAlone() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(500, seed: 65)
        h.server.store(bytes)
        let c = try h.commit(bytes, path: "Camera Roll/half.jpg", settled: false)
        let report = try h.makeWorker().sync()
        #expect(report.linked == 0)
        #expect(try h.item(c).isWriting)
        #expect(h.server.records.isEmpty)
        try BackupQueue.settle(in: h.db, inode: c.inode)
        #expect(try h.makeWorker().sync().linked == 1)
        #expect(h.server.records[c.changeSequence] != nil)
    }

    @Test func aRunningEngineSendsASettledVersionWhenWoken() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: noHoldPolicy)
        try engine.start()
        defer { engine.stop() }
        let c = try h.commit(testBytes(700, seed: 66), path: "Camera Roll/w.jpg", settled: false)
        engine.wake()
        try eventually("writing status") { engine.status().waitingCode == "writing" }
        #expect(h.server.stats.bytesReceived == 0)
        try BackupQueue.settle(in: h.db, inode: c.inode)
        engine.wake()  // the drive wakes the engine after the release's transaction
        try eventually("done once settled") { try h.state(c) == .done }
        #expect(h.server.stats.bytesReceived == 700)
    }
}
