import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

@Suite struct UploaderTests {
    @Test func uploadsInChunksAndMarksDoneOnlyWhenServerHasTheBlob() throws {
        let h = try Harness(chunkSize: 64 * 1024); defer { h.remove() }
        let bytes = testBytes(200_000, seed: 10)  // 4 chunks: 3 full + 1 partial
        let c = try h.commit(bytes, path: "Camera Roll/big.jpg")
        let worker = h.makeWorker()
        #expect(try worker.drain() == .empty(nextDue: nil))
        let item = try h.item(c)
        #expect(item.state == .done)
        #expect(!item.linked)
        #expect(item.recorded)
        #expect(h.server.blobs[c.hash] == bytes)
        #expect(h.server.stats.patches == 4)
        #expect(h.server.stats.bytesReceived == Int64(bytes.count))
        #expect(h.server.records[c.changeSequence]?.path == "Camera Roll/big.jpg")
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
    }

    @Test func resumeAfterKillAsksServerOffsetAndResendsAtMostOneChunk() throws {
        let chunk = 64 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let bytes = testBytes(10 * chunk + 1234, seed: 12)
        let c = try h.commit(bytes, path: "Camera Roll/video.mov")
        // The connection dies in the middle of the 4th chunk.
        let server = h.server
        server.setAfterPatch { offset in
            if offset == Int64(3 * chunk) { server.inject(.dropAfter(bytes: chunk / 3), on: .patch) }
        }
        let first = h.makeWorker()
        let result = try first.drain()
        guard case .empty(let nextDue?) = result else { Issue.record("expected a backoff, got \(result)"); return }
        let serverOffset = try #require(h.server.pendingOffset(of: c.hash))
        #expect(serverOffset == Int64(3 * chunk + chunk / 3))
        first.releaseLock()
        server.setAfterPatch(nil)

        // Simulate the kill: the process died with the row `uploading` and a stale local
        // record of progress (0); a new engine instance opens the same database.
        try h.db.run("UPDATE backup_items SET state = 'uploading', bytes_sent = 0 WHERE change_sequence = ?", c.changeSequence)
        h.clock.advance(nextDue - h.clock.now)
        let second = h.makeWorker()
        #expect(try second.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.blobs[c.hash] == bytes)
        #expect(h.server.stats.heads >= 1)  // asked the server, did not trust the local record
        let resent = h.server.stats.bytesReceivedByHash[c.hash]! - Int64(bytes.count)
        #expect(resent <= Int64(chunk))
        #expect(resent == 0)  // tus keeps the partial PATCH: nothing re-sent at all here
    }

    @Test func killMidFileResumesMidFile() throws {
        let chunk = 64 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let bytes = testBytes(8 * chunk, seed: 13)
        let c = try h.commit(bytes, path: "Camera Roll/clip.mp4")
        // First run: stopped (as by unmount) after the 5th chunk is acknowledged.
        #expect(try h.drainStopping(atServerOffset: Int64(5 * chunk)) == .stopped)
        #expect(try h.state(c) == .pending)
        #expect(h.server.pendingOffset(of: c.hash) == Int64(5 * chunk))

        let second = h.makeWorker()
        #expect(try second.drain() == .empty(nextDue: nil))
        #expect(h.server.blobs[c.hash] == bytes)
        #expect(h.server.stats.bytesReceivedByHash[c.hash] == Int64(bytes.count))
    }

    @Test func expiredURLIsRenewedBeforeTheNextAttempt() throws {
        let chunk = 64 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let bytes = testBytes(3 * chunk, seed: 14)
        let c = try h.commit(bytes, path: "Camera Roll/e.jpg")
        #expect(try h.drainStopping(atServerOffset: Int64(chunk)) == .stopped)
        #expect(try h.item(c).uploadURL != nil)
        h.server.expireAllURLs()

        #expect(try h.makeWorker().drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.creates == 2)  // one URL at first, one renewal
        #expect(h.server.stats.bytesReceivedByHash[c.hash] == Int64(bytes.count))
        #expect(try h.item(c).uploadURL == nil)
    }

    @Test func urlAboutToExpireLocallyIsRenewedWithoutAsking() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 15), path: "Camera Roll/f.jpg")
        try h.queue.saveUpload(try h.item(c).id, url: "mem://stale", expiresAt: h.clock.now + 10)
        #expect(try h.makeWorker().drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.heads == 0)
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

    @Test func wrongHashAcknowledgedIsNeverMarkedDone() throws {
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
        #expect(h.server.blobs[c.hash] == nil)
        #expect(outcomes.count == 3)
        #expect(!outcomes.contains(.sent))
    }

    @Test func corruptLocalBlobFailsAndNothingWrongCompletes() throws {
        let chunk = 64 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let small = testBytes(1000, seed: 19)
        let large = testBytes(3 * chunk + 5, seed: 20)
        let s = try h.commit(small, path: "Camera Roll/small.jpg")
        let l = try h.commit(large, path: "Camera Roll/large.jpg")
        try corrupt(h.blobs.path(for: s.hash), at: 10)
        try corrupt(h.blobs.path(for: l.hash), at: Int64(large.count - 2))
        _ = try h.makeWorker().drain()
        for commit in [s, l] {
            let item = try h.item(commit)
            #expect(item.state == .failed)
            #expect(item.failureReason?.contains("corrupt") == true)
        }
        // The one-chunk file sent nothing; the large one never sent its last chunk, so the
        // server never completed (and so never stored) either upload.
        #expect(h.server.stats.bytesReceivedByHash[s.hash] == nil)
        #expect(h.server.stats.bytesReceivedByHash[l.hash] == Int64(3 * chunk))
        #expect(h.server.stats.completions == 0)
        #expect(h.server.blobs.isEmpty)
    }

    @Test func missingLocalBlobFailsWithReason() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 21), path: "Camera Roll/gone.jpg")
        chmod(h.blobs.path(for: c.hash), 0o600)
        try FileIO.unlink(h.blobs.path(for: c.hash))
        _ = try h.makeWorker().drain()
        let item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason?.contains("missing") == true)
        #expect(h.server.stats.patches == 0)
    }

    @Test func pauseMidUploadStopsWithinOneChunkAndSendsNothingWhileHeld() throws {
        let chunk = 64 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let bytes = testBytes(10 * chunk, seed: 22)
        let c = try h.commit(bytes, path: "Camera Roll/long.mov")
        let settings = h.settings
        // The user pauses just as the 1st chunk is acknowledged.
        h.server.setAfterPatch { offset in if offset == Int64(chunk) { settings.update { $0.paused = true } } }
        let worker = h.makeWorker()
        #expect(try worker.drain() == .held(.paused))
        let sent = h.server.stats.bytesReceived
        #expect(sent == Int64(chunk))  // not one byte after the pause
        #expect(try h.state(c) == .pending)

        // While held, draining sends nothing.
        #expect(try worker.drain() == .held(.paused))
        #expect(h.server.stats.bytesReceived == sent)

        h.server.setAfterPatch(nil)
        settings.update { $0.paused = false }
        #expect(try worker.drain() == .empty(nextDue: nil))
        #expect(h.server.blobs[c.hash] == bytes)
    }

    @Test func cancelMidChunkKeepsServerOffsetAndLeavesItemPending() throws {
        let chunk = 256 * 1024
        let h = try Harness(chunkSize: chunk); defer { h.remove() }
        let c = try h.commit(testBytes(2 * chunk, seed: 23), path: "Camera Roll/j.jpg")
        let calls = Counter()
        // Stop requested after the first progress tick of the first chunk.
        let worker = h.makeWorker(shouldContinue: { calls.increment() < 2 })
        #expect(try worker.drain() == .stopped)
        #expect(try h.state(c) == .pending)
        #expect(h.server.stats.bytesReceived < Int64(chunk))
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
        let h = try Harness(chunkSize: 1 << 20); defer { h.remove() }
        let bytes = testBytes(8 << 20, seed: 25)
        let c = try h.commit(bytes, path: "Camera Roll/8MiB.mov")
        let worker = h.makeWorker()
        let before = try threadReadBytes()
        _ = try worker.drain()
        let read = try threadReadBytes() - before
        #expect(try h.state(c) == .done)
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
        _ = try h.makeWorker().drain()
        #expect(try h.state(c) == .done)
        #expect(h.server.blobs[c.hash] == [])
        #expect(h.server.stats.patches == 0)
    }

    @Test func captureDateIsReadFromTheFirstChunk() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(try Fixtures.bytes("DSC_1999.jpg"), path: "Camera Roll/DSC_1999.jpg")
        _ = try h.makeWorker().drain()
        let item = try h.item(c)
        #expect(item.captureDate == "2015-03-01T12:00:00")
        #expect(item.captureSource == "exif")
        #expect(h.server.records[c.changeSequence]?.captureDate == "2015-03-01T12:00:00")
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
