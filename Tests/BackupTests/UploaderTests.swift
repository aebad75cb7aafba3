import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

@Suite(.tags(.logic)) struct UploaderTests {
    @Test func uploadsBlockByBlockAndIsDoneOnlyOnceRecorded() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(10 * MiB + 1234, seed: 10)  // 3 blocks: 4 + 4 + 2 MiB and a bit
        let c = try h.commit(bytes, path: "Camera Roll/big.jpg")
        #expect(c.blocks.count == 3)
        let worker = h.makeWorker()
        #expect(try worker.drain() == .empty(nextDue: nil))
        let item = try h.item(c)
        #expect(item.state == .done)
        #expect(!item.linked)
        #expect(item.recorded)
        #expect(item.bytesSent == Int64(bytes.count))
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.patches == 3)  // one PATCH per block
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
        let record = try #require(h.server.records[c.changeSequence])
        #expect(record.path == "Camera Roll/big.jpg")
        #expect(record.hash == c.hash)
        #expect(record.blocks == c.blocks)
    }

    @Test func sameContentTwiceIsSentOnce() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = try Fixtures.bytes("IMG_0001.jpg")
        let copy = try Fixtures.bytes("IMG_0001_copy.jpg")
        let a = try h.commit(bytes, path: "Camera Roll/IMG_0001.jpg")
        let b = try h.commit(copy, path: "Camera Roll/IMG_0001_copy.jpg")
        #expect(a.hash == b.hash)
        var outcomes: [UploadOutcome] = []
        _ = try h.makeWorker().drain { _, outcome in outcomes.append(outcome) }
        #expect(outcomes == [.sent, .linked])
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
        #expect(try h.state(a) == .done)
        #expect(try h.state(b) == .done)
        #expect(h.server.records.count == 2)
    }

    @Test func contentAlreadyOnServerIsLinkedWithoutSending() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(5000, seed: 11)
        h.server.store(bytes)  // another device sent it
        let c = try h.commit(bytes, path: "Camera Roll/shared.jpg")
        var outcomes: [UploadOutcome] = []
        _ = try h.makeWorker().drain { _, outcome in outcomes.append(outcome) }
        #expect(outcomes == [.linked])
        #expect(h.server.stats.bytesReceived == 0)
        #expect(try h.item(c).linked)
        #expect(h.server.records[c.changeSequence]?.hash == c.hash)
    }

    /// A PATCH cut in the middle of block 1; the process then dies (the row is left
    /// `uploading` with a stale progress). The next run asks the server for its plan,
    /// which carries the offset it kept, and sends only the rest of that block: nothing
    /// is re-sent, and only the bytes sent are read (plus the capture date's prefix of
    /// block 0, which is not sent again).
    @Test func resumeMidBlockAfterAnInterruptedPatchSendsOnlyTheRest() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(10 * MiB, seed: 12)
        let c = try h.commit(bytes, path: "Camera Roll/video.mov")
        let cut = MiB + 7
        let server = h.server
        server.setAfterPatch { offset in
            if offset == Int64(Blocks.size) { server.inject(.dropAfter(bytes: cut), on: .patch) }
        }
        let first = h.makeWorker()
        let result = try first.drain()
        guard case .empty(let nextDue?) = result else { Issue.record("expected a backoff, got \(result)"); return }
        #expect(h.server.pendingOffset(ofBlock: c.blocks[1]) == Int64(cut))
        #expect(try h.item(c).bytesSent == Int64(Blocks.size))  // block 0 acknowledged, block 1 not whole
        first.releaseLock()
        server.setAfterPatch(nil)

        try h.db.run("UPDATE backup_items SET state = 'uploading', bytes_sent = 0 WHERE change_sequence = ?", c.changeSequence)
        h.clock.advance(nextDue - h.clock.now)
        let second = h.makeWorker()
        let receivedBefore = h.server.stats.bytesReceived
        let readBefore = try threadReadBytes()
        #expect(try second.drain() == .empty(nextDue: nil))
        let read = try threadReadBytes() - readBefore
        let sent = h.server.stats.bytesReceived - receivedBefore
        #expect(try h.state(c) == .done)
        #expect(h.server.content(c.hash) == bytes)
        #expect(sent == Int64(bytes.count - Blocks.size - cut))  // the rest of block 1, then block 2
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))  // nothing re-sent
        #expect(Double(read) <= Double(sent) * 1.05 + Double(CaptureDate.prefixLength), "read \(read) to send \(sent)")
    }

    @Test func stopBetweenBlocksResumesAtTheNextBlock() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(12 * MiB, seed: 13)
        let c = try h.commit(bytes, path: "Camera Roll/clip.mp4")
        // First run: stopped (as by unmount) once block 0 is acknowledged.
        #expect(try h.drainStopping(atServerOffset: Int64(Blocks.size)) == .stopped)
        #expect(try h.state(c) == .pending)
        #expect(h.server.storedBlocks[c.blocks[0]] != nil)
        #expect(h.server.stats.bytesReceived == Int64(Blocks.size))

        let second = h.makeWorker()
        #expect(try second.drain() == .empty(nextDue: nil))
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
    }

    @Test func urlsExpiredMidTransferAreRenewedAndTheTransferGoesOn() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(12 * MiB, seed: 14)
        let c = try h.commit(bytes, path: "Camera Roll/e.jpg")
        let server = h.server
        let once = Counter()
        server.setAfterPatch { _ in if once.increment() == 0 { server.expireAllURLs() } }  // after block 0
        var outcomes: [UploadOutcome] = []
        #expect(try h.makeWorker().drain { _, o in outcomes.append(o) } == .empty(nextDue: nil))
        #expect(outcomes == [.sent])  // in the same attempt, without a backoff
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.creates == 2)  // one plan at first, one renewal
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
    }

    /// URLs about to expire by the device's clock are renewed before the next block,
    /// without a PATCH being refused first.
    @Test func urlsAboutToExpireAreRenewedBeforeUse() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(12 * MiB, seed: 15)
        let c = try h.commit(bytes, path: "Camera Roll/f.jpg")
        let clock = h.clock
        // The transfer of block 0 takes (for the device's clock) most of the URLs' hour.
        let once = Counter()
        h.server.setAfterPatch { _ in if once.increment() == 0 { clock.advance(3600 - 30) } }
        var outcomes: [UploadOutcome] = []
        #expect(try h.makeWorker().drain { _, o in outcomes.append(o) } == .empty(nextDue: nil))
        #expect(outcomes == [.sent])
        #expect(h.server.stats.creates == 2)  // renewed ahead: the server never had to refuse
        #expect(h.server.stats.patches == 3)
        #expect(try h.state(c) == .done)
    }

    /// A device clock far from the server's (the URLs look expired on arrival) must not
    /// renew in a loop: the server's own answer decides.
    @Test(arguments: [-86_400.0, 86_400.0])
    func aSkewedClockStillUploads(_ skew: Double) throws {
        let h = try Harness(); defer { h.remove() }
        h.server.setNow(h.clock.now + skew)
        let c = try h.commit(testBytes(6 * MiB, seed: 16), path: "Camera Roll/skew.jpg")
        #expect(try h.makeWorker().drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.creates == 1)
    }

    @Test(arguments: [InMemoryTransport.Fault.refuse, .serverError, .hang])
    func transientErrorsAreRetriedWithBackoff(_ fault: InMemoryTransport.Fault) throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 16), path: "Camera Roll/g.jpg")
        h.server.inject(fault, on: .createUpload, times: 2)
        let worker = h.makeWorker()
        var delays: [Double] = []
        for _ in 0..<2 {
            guard case .empty(let due?) = try worker.drain() else { Issue.record("expected backoff"); return }
            #expect(try h.state(c) == .pending)
            #expect(try h.item(c).lastError != nil)
            delays.append(due - h.clock.now)
            h.clock.advance(due - h.clock.now)
        }
        // random() is 0.5: 3/4 of the ceiling, which doubles: 5 s then 10 s.
        #expect(delays == [3.75, 7.5])
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(try h.item(c).attempts == 2)
    }

    @Test func backoffIsCappedAndJittered() {
        let policy = RetryPolicy(base: 5, cap: 900)
        #expect(policy.delay(afterAttempt: 0, random: 0) == 2.5)
        #expect(policy.delay(afterAttempt: 0, random: 1) == 5)
        #expect(policy.delay(afterAttempt: 20, random: 0) == 450)
        #expect(policy.delay(afterAttempt: 1000, random: 1) == 900)
    }

    @Test func permanentErrorFailsWithReasonAndRetryResets() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 17), path: "Camera Roll/h.jpg")
        h.server.inject(.forbidden, on: .createUpload)
        var outcomes: [UploadOutcome] = []
        #expect(try h.makeWorker().drain { _, o in outcomes.append(o) } == .empty(nextDue: nil))
        let item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason?.contains("403") == true)
        #expect(try h.queue.retryFailed() == 1)
        #expect(try h.makeWorker().drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
    }

    /// The server acknowledges every byte but files the block under another digest (a
    /// broken proxy or disk): the record is refused for a missing block, each time.
    @Test func blocksAcknowledgedButNotHeldAreNeverMarkedDone() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(150_000, seed: 18)
        let c = try h.commit(bytes, path: "Camera Roll/i.jpg")
        h.server.inject(.acknowledgeWrongBytes, on: .patch, times: 10)
        let worker = h.makeWorker(maxIntegrityFailures: 3)
        var outcomes: [UploadOutcome] = []
        for _ in 0..<5 {
            let result = try worker.drain { _, o in outcomes.append(o) }
            #expect(try h.state(c) != .done)
            guard case .empty(let due?) = result else { break }
            h.clock.advance(due - h.clock.now)
        }
        let item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason?.contains("does not hold") == true)
        #expect(h.server.content(c.hash) == nil)
        #expect(h.server.records.isEmpty)
        #expect(outcomes.count == 3)
        #expect(!outcomes.contains(.sent))
    }

    /// A block that the server loses between its PATCH and the record (409 missing_blocks)
    /// is sent again in the same attempt: no backoff, no attempt counted.
    @Test func missingBlocksAtRecordTimeAreSentAgainWithoutBackoff() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(6 * MiB, seed: 28)
        let c = try h.commit(bytes, path: "Camera Roll/lost.jpg")
        let server = h.server
        let lost = c.blocks[1]
        let once = Counter()
        server.setAfterPatch { _ in
            if server.storedBlocks[lost] != nil, once.increment() == 0 { server.forgetBlock(lost) }
        }
        var outcomes: [UploadOutcome] = []
        #expect(try h.makeWorker().drain { _, o in outcomes.append(o) } == .empty(nextDue: nil))
        #expect(outcomes == [.sent])
        #expect(try h.item(c).attempts == 0)
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.bytesReceivedByBlock[lost] == 2 * Int64(Blocks.length(ofBlock: 1, fileSize: c.size)))
        #expect(h.server.stats.bytesReceivedByBlock[c.blocks[0]] == Int64(Blocks.size))  // only the lost one again
    }

    /// A damaged local block: the server refuses it (its checksum is the block's digest,
    /// which the damaged bytes do not have), the uploader re-reads it to tell a damaged
    /// copy from damage on the way, and the item fails. Nothing wrong is ever stored.
    @Test func damagedLocalBlockFailsAndNothingWrongIsStored() throws {
        let h = try Harness(); defer { h.remove() }
        let small = testBytes(1000, seed: 19)
        let large = testBytes(3 * Blocks.size + 5, seed: 20)
        let s = try h.commit(small, path: "Camera Roll/small.jpg")
        let l = try h.commit(large, path: "Camera Roll/large.jpg")
        try corrupt(h.blobs.path(for: s.blocks[0]), at: 10)
        try corrupt(h.blobs.path(for: l.blocks[1]), at: 123_456)
        _ = try h.makeWorker().drain()
        for commit in [s, l] {
            let item = try h.item(commit)
            #expect(item.state == .failed)
            #expect(item.failureReason?.contains("corrupt") == true)
            #expect(h.server.content(commit.hash) == nil)
        }
        #expect(try h.item(l).failureReason?.contains("block 1") == true)
        #expect(h.server.records.isEmpty)
        #expect(h.server.storedBlocks[s.blocks[0]] == nil)
        #expect(h.server.storedBlocks[l.blocks[1]] == nil)
        // Whatever the server keeps is filed under its own digest.
        for (digest, block) in h.server.storedBlocks { #expect(SHA256Hasher.digest(block) == digest) }
    }

    @Test func missingLocalBlockFailsWithReason() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 21), path: "Camera Roll/gone.jpg")
        chmod(h.blobs.path(for: c.blocks[0]), 0o600)
        try FileIO.unlink(h.blobs.path(for: c.blocks[0]))
        _ = try h.makeWorker().drain()
        let item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason?.contains("missing") == true)
        #expect(h.server.stats.patches == 0)
    }

    @Test func pauseMidUploadStopsWithinOneBlockAndSendsNothingWhileHeld() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(12 * MiB, seed: 22)
        let c = try h.commit(bytes, path: "Camera Roll/long.mov")
        let settings = h.settings
        // The user pauses just as block 0 is acknowledged.
        h.server.setAfterPatch { offset in if offset == Int64(Blocks.size) { settings.update { $0.paused = true } } }
        let worker = h.makeWorker()
        #expect(try worker.drain() == .held(.paused))
        let sent = h.server.stats.bytesReceived
        #expect(sent == Int64(Blocks.size))  // not one byte after the pause
        #expect(try h.state(c) == .pending)

        // While held, draining sends nothing.
        #expect(try worker.drain() == .held(.paused))
        #expect(h.server.stats.bytesReceived == sent)

        h.server.setAfterPatch(nil)
        settings.update { $0.paused = false }
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(h.server.content(c.hash) == bytes)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
    }

    @Test func cancelMidBlockKeepsServerOffsetAndLeavesItemPending() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(8 * MiB, seed: 23), path: "Camera Roll/j.jpg")
        let calls = Counter()
        // Stop requested at the first progress tick of block 0 (after the drain's and the
        // uploader's own checks).
        let worker = h.makeWorker(shouldContinue: { calls.increment() < 2 })
        #expect(try worker.drain() == .stopped)
        #expect(try h.state(c) == .pending)
        #expect(h.server.stats.bytesReceived < Int64(Blocks.size))
        #expect(h.server.pendingOffset(ofBlock: c.blocks[0]) == h.server.stats.bytesReceived)
        #expect(try h.item(c).attempts == 0)  // a stop is not a failure
    }

    @Test func onlyOneProcessUploadsAtATime() throws {
        let h = try Harness(); defer { h.remove() }
        try h.commit(testBytes(100, seed: 24), path: "Camera Roll/k.jpg")
        let holder = try #require(try UploadLock.acquire(stateFolder: h.stateFolder))
        #expect(try h.makeWorker().drain() == .busy)
        #expect(h.server.stats.patches == 0)
        _ = holder
    }

    /// Bytes read per byte uploaded, counted by the kernel for this thread (`rchar` in
    /// /proc/thread-self/io: every read and pread, SQLite's included). The drain runs
    /// synchronously on the test's thread.
    @Test func eachByteIsReadOnce() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(9 * MiB, seed: 25)
        let c = try h.commit(bytes, path: "Camera Roll/9MiB.mov")
        let worker = h.makeWorker()
        let before = try threadReadBytes()
        _ = try worker.drain()
        let read = try threadReadBytes() - before
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
        let ratio = Double(read) / Double(bytes.count)
        #expect(ratio >= 1.0 && ratio <= 1.05, "read \(read) bytes to upload \(bytes.count)")
    }

    @Test func itemReplacedBeforeItsTurnIsLeftAlone() throws {
        let h = try Harness(); defer { h.remove() }
        let old = try h.commit(testBytes(100, seed: 26), path: "Camera Roll/x.jpg")
        let worker = h.makeWorker()
        let due = try #require(try h.queue.nextDue(now: h.clock.now))
        try h.commit(testBytes(101, seed: 27), path: "Camera Roll/x.jpg")  // the drive, meanwhile
        #expect(try worker.uploader.process(due) == .superseded)
        #expect(h.server.stats.creates == 0)
        #expect(try h.queue.allItems().map(\.changeSequence) == [old.changeSequence + 1])
    }

    @Test func emptyFileIsBackedUpWithoutAPatch() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit([], path: "Camera Roll/empty.jpg")
        #expect(c.blocks.isEmpty)
        _ = try h.makeWorker().drain()
        #expect(try h.state(c) == .done)
        #expect(h.server.content(c.hash) == [])
        #expect(h.server.records[c.changeSequence] != nil)
        #expect(h.server.stats.patches == 0)
    }

    @Test func aRowWhoseBlocksDoNotNameItsContentFailsWithoutAsking() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 29), path: "Camera Roll/old.jpg")
        // As a row queued before blocks and never migrated: no block list.
        try h.db.run("UPDATE backup_items SET blocks = '[]' WHERE change_sequence = ?", c.changeSequence)
        _ = try h.makeWorker().drain()
        let item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason?.contains("block list") == true)
        #expect(h.server.stats.creates == 0)
    }

    @Test func captureDateIsReadFromTheFirstBlock() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(try Fixtures.bytes("DSC_1999.jpg"), path: "Camera Roll/DSC_1999.jpg")
        _ = try h.makeWorker().drain()
        let item = try h.item(c)
        #expect(item.captureDate == "2015-03-01T12:00:00")
        #expect(item.captureSource == "exif")
        #expect(h.server.records[c.changeSequence]?.captureDate == "2015-03-01T12:00:00")
    }

    @Test func captureDateOfALinkedItemIsReadFromItsFirstBlock() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = try Fixtures.bytes("DSC_1999.jpg")
        h.server.store(bytes)
        let c = try h.commit(bytes, path: "Camera Roll/DSC_1999.jpg")
        _ = try h.makeWorker().drain()
        #expect(try h.item(c).linked)
        #expect(try h.item(c).captureDate == "2015-03-01T12:00:00")
    }
}

func corrupt(_ path: String, at offset: Int64) throws {
    chmod(path, 0o600)
    let fd = try FileIO.open(path, O_RDWR)
    defer { FileIO.close(fd) }
    var byte: [UInt8] = [0]
    _ = try byte.withUnsafeMutableBytes { try FileIO.pread(fd, into: $0, at: offset) }
    byte[0] ^= 0x5A
    try byte.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: offset) }
}

func threadReadBytes() throws -> Int64 {
    let text = try String(contentsOfFile: "/proc/thread-self/io", encoding: .utf8)
    let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("rchar:") })
    return try #require(Int64(line.dropFirst("rchar:".count).trimmingCharacters(in: .whitespaces)))
}

final class StopFlag: Sendable {
    private let flag = Mutex(false)
    func set() { flag.withLock { $0 = true } }
    var isSet: Bool { flag.withLock { $0 } }
}

final class Counter: Sendable {
    private let value = Mutex(0)
    /// Returns the value before incrementing.
    func increment() -> Int { value.withLock { v in defer { v += 1 }; return v } }
}

import Synchronization
