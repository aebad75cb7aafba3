import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// Transfers by block: only the blocks the server lacks are sent, zero
/// blocks never, and progress counts the blocks the server already has as done.
@Suite(.tags(.logic)) struct BlockTests {
    @Test func aSecondItemSharingBlocksSendsOnlyItsNewBlocks() throws {
        let h = try Harness(); defer { h.remove() }
        let a = testBytes(10 * MiB, seed: 70)
        let b = Array(a[0..<(8 * MiB)]) + testBytes(2 * MiB, seed: 71)
        let ca = try h.commit(a, path: "Camera Roll/a.mov")
        let cb = try h.commit(b, path: "Camera Roll/b.mov")
        #expect(Array(ca.blocks[0..<2]) == Array(cb.blocks[0..<2]) && ca.hash != cb.hash)
        var outcomes: [UploadOutcome] = []
        _ = try h.makeWorker().drain { _, o in outcomes.append(o) }
        #expect(outcomes == [.sent, .sent])
        #expect(h.server.stats.bytesReceived == Int64(10 * MiB + 2 * MiB))  // b's last block only
        #expect(h.server.stats.bytesReceivedByBlock[cb.blocks[2]] == Int64(2 * MiB))
        #expect(h.server.content(cb.hash) == b)
        #expect(try h.item(cb).bytesSent == Int64(b.count))
    }

    @Test func aChangedFileSendsOnlyItsChangedBlock() throws {
        let h = try Harness(); defer { h.remove() }
        var bytes = testBytes(16 * MiB, seed: 72)
        let v1 = try h.commit(bytes, path: "Camera Roll/edit.mov")
        _ = try h.makeWorker().drain()
        for i in 0..<4096 { bytes[5 * MiB + i] ^= 0xA5 }  // 4 KiB rewritten inside block 1
        let v2 = try h.commit(bytes, path: "Camera Roll/edit.mov")
        let before = h.server.stats.bytesReceived
        _ = try h.makeWorker().drain()
        #expect(try h.state(v1) == .done && h.state(v2) == .done)
        #expect(h.server.stats.bytesReceived - before == Int64(Blocks.size))
        #expect(h.server.content(v2.hash) == bytes)
    }

    @Test func blocksAlreadyOnTheServerCountAsDone() throws {
        let h = try Harness(); defer { h.remove() }
        let shared = testBytes(8 * MiB, seed: 73)
        h.server.storeBlock(Array(shared[0..<Blocks.size]))
        h.server.storeBlock(Array(shared[Blocks.size...]))
        let c = try h.commit(shared + testBytes(2 * MiB, seed: 74), path: "Camera Roll/p.mov")
        h.server.inject(.dropAfter(bytes: MiB), on: .patch)  // the one block left is cut
        guard case .empty(_?) = try h.makeWorker().drain() else { Issue.record("expected a backoff"); return }
        #expect(try h.item(c).bytesSent == Int64(8 * MiB))
        #expect(try h.queue.counts().bytesLeft == Int64(2 * MiB))
        #expect(h.server.stats.bytesReceived == Int64(MiB))
    }

    /// The digest of a run of zeros, resumed from a saved point, is the digest of those
    /// bytes, at and around every boundary and for lengths asked in any order.
    @Test func aRunOfZerosHasTheDigestOfItsBytes() {
        let lengths = [Blocks.size, 1, 4095, 4096, 4097, 8191, 65536 + 13, 0, 35_000, Blocks.size - 1, 12_288]
        for length in lengths {
            #expect(Blocks.zeroDigest(length: length) == SHA256Hasher.digest([UInt8](repeating: 0, count: length)), "length \(length)")
        }
        #expect(!Blocks.isZero(SHA256Hasher.digest([0, 0, 1]), length: 3))
        #expect(Blocks.isZero(SHA256Hasher.digest([UInt8](repeating: 0, count: 70_000)), length: 70_000))
    }

    @Test func zeroBlocksAreNeverSent() throws {
        let h = try Harness(); defer { h.remove() }
        let zeros = [UInt8](repeating: 0, count: Blocks.size)
        let bytes = zeros + testBytes(Blocks.size, seed: 75) + [UInt8](repeating: 0, count: MiB)
        let c = try h.commit(bytes, path: "Camera Roll/sparse.mov")
        #expect(Blocks.isZero(c.blocks[0], length: Blocks.size) && Blocks.isZero(c.blocks[2], length: MiB))
        #expect(!h.blobs.contains(c.blocks[0]))  // the drive stores no zero block either
        _ = try h.makeWorker().drain()
        #expect(try h.state(c) == .done)
        #expect(h.server.stats.patches == 1)
        #expect(h.server.stats.bytesReceived == Int64(Blocks.size))
        #expect(h.server.storedBlocks[c.blocks[0]] == nil && h.server.storedBlocks[c.blocks[2]] == nil)
        #expect(h.server.content(c.hash) == bytes)
    }

    @Test func anAllZeroFileSendsNothingAndIsRecorded() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit([UInt8](repeating: 0, count: 9 * MiB), path: "Camera Roll/hole.raw")
        var outcomes: [UploadOutcome] = []
        _ = try h.makeWorker().drain { _, o in outcomes.append(o) }
        #expect(outcomes == [.sent])  // recorded by this device, with no byte to send
        #expect(h.server.stats.patches == 0)
        #expect(h.server.records[c.changeSequence]?.blocks == c.blocks)
        #expect(h.server.content(c.hash)?.count == 9 * MiB)
    }

    @Test func aBlockRepeatedInOneFileIsSentOnce() throws {
        let h = try Harness(); defer { h.remove() }
        let block = testBytes(Blocks.size, seed: 76)
        let bytes = block + block + Array(block[0..<1000])
        let c = try h.commit(bytes, path: "Camera Roll/loop.mov")
        #expect(c.blocks[0] == c.blocks[1])
        _ = try h.makeWorker().drain()
        #expect(h.server.stats.bytesReceived == Int64(Blocks.size + 1000))
        #expect(h.server.content(c.hash) == bytes)
    }

    @Test func aPlanNamingAnotherBlockIsRefused() throws {
        let item = try #require(try {
            let h = try Harness(); defer { h.remove() }
            let c = try h.commit(testBytes(5 * MiB, seed: 77), path: "Camera Roll/q.mov")
            return try h.item(c)
        }())
        let good = BlockUpload(index: 1, hash: item.blocks[1], length: Int64(MiB), url: "u", offset: 0)
        #expect(try ItemUploader.checked([good, good], against: item) == [good])
        var wrongHash = good; wrongHash.hash = item.blocks[0]
        var wrongLength = good; wrongLength.length = Int64(Blocks.size)
        var pastEnd = good; pastEnd.offset = Int64(MiB) + 1
        var outside = good; outside.index = 2
        for plan in [wrongHash, wrongLength, pastEnd, outside] {
            #expect(throws: BackupTransportError.self) { try ItemUploader.checked([plan], against: item) }
        }
    }
}
