import Testing
import Foundation
import Synchronization
import Crypto
import Storage
@testable import Drive

/// Blocks fetched whole for a sequential reader: served from memory once checked, never
/// before; written to the store all the same; the memory bounded and given back.
@Suite(.tags(.logic)) struct FetchedBlocksTests {
    func filled(_ blocks: FetchedBlocks, _ bytes: [UInt8]) -> FetchedBlock {
        let b = blocks.makeBlock(capacity: bytes.count)!
        bytes.withUnsafeBytes { b.append($0) }
        return b
    }

    @Test func aBlockLeavesOnceEveryByteWasServedAndTheBoundPushesOutTheOldest() throws {
        let blocks = FetchedBlocks(limit: 2, poolLimit: 4)
        let a = SHA256Digest(hex: String(repeating: "a", count: 64))!
        let b = SHA256Digest(hex: String(repeating: "b", count: 64))!
        let c = SHA256Digest(hex: String(repeating: "c", count: 64))!
        blocks.publish(a, filled(blocks, [1, 2, 3, 4]))
        #expect(blocks.take(a, 0..<2).map { Array($0.bytes(0..<2)) } == [1, 2])
        #expect(blocks.take(a, 2..<5) == nil, "past the block's end")
        #expect(blocks.take(a, 2..<4) != nil)
        #expect(blocks.take(a, 0..<1) == nil, "served whole: gone")
        blocks.publish(a, filled(blocks, [5]))
        blocks.publish(b, filled(blocks, [6]))
        blocks.publish(c, filled(blocks, [7]))
        #expect(blocks.count == 2)
        #expect(blocks.take(a, 0..<1) == nil, "the oldest went first")
        #expect(blocks.take(c, 0..<1).map { Array($0.bytes(0..<1)) } == [7])
    }

    @Test func memoryOfBlocksThatLeftIsReusedThenUnmappedWhenIdle() throws {
        let blocks = FetchedBlocks(limit: 1, poolLimit: 2, maxAgeSeconds: 0.2, poolIdleSeconds: 0.3)
        let a = SHA256Digest(hex: String(repeating: "a", count: 64))!
        blocks.publish(a, filled(blocks, [1]))
        #expect(blocks.pooled == 0)
        _ = blocks.take(a, 0..<1)   // served whole: the block goes, its memory to the pool
        #expect(blocks.pooled == 1)
        do {
            let again = blocks.makeBlock(capacity: 10)
            #expect(again != nil && blocks.pooled == 0, "taken from the pool")
        }
        #expect(blocks.pooled == 1)
        let deadline = Date(timeIntervalSinceNow: 10)
        while blocks.pooled > 0 && Date() < deadline { usleep(50_000) }
        #expect(blocks.pooled == 0, "unmapped once idle")
        // A block a reader left half read goes with age, and its memory after it.
        blocks.publish(a, filled(blocks, [1, 2]))
        _ = blocks.take(a, 0..<1)
        let later = Date(timeIntervalSinceNow: 10)
        while (blocks.count > 0 || blocks.pooled > 0) && Date() < later { usleep(50_000) }
        #expect(blocks.count == 0 && blocks.pooled == 0)
    }

    @Test func aSequentialReaderIsAnsweredFromMemoryAndTheStoreHoldsEveryBlockAfterwards() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try BlockCacheTests().onlineOnlyFile(dir, size: 3 * Blocks.size + 12_345)
        remote.state.withLock { $0.heldNonInteractive = true }   // the reader fetches each block itself
        let fh = try fs.open(ino, writable: false, truncate: false)
        var got: [UInt8] = []
        var fromMemory = 0
        let step = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: step, alignment: 4096)
        defer { buffer.deallocate() }
        while got.count < bytes.count {
            let source = try fs.readSource(fh, count: step, at: Int64(got.count)) { buffer }
            guard case .pieces(let pieces) = source else { Issue.record("a committed file's read copied bytes"); break }
            if pieces.isEmpty { break }
            for piece in pieces {
                switch piece {
                case .memory(let m, let offset, let length):
                    fromMemory += length
                    got += Array(m.bytes(offset..<(offset + length)))
                case .block(let d, let offset, let length):
                    var part = [UInt8](repeating: 0, count: length)
                    _ = try part.withUnsafeMutableBytes { try FileIO.pread(d.fd, into: $0, at: offset) }
                    got += part
                case .zeros(let n):
                    got += [UInt8](repeating: 0, count: n)
                }
            }
        }
        fs.release(fh)
        #expect(got == bytes)
        // The first block comes in chunks, the reader's window ramping up; every later
        // one whole, served from memory, and gone from it once served.
        #expect(fromMemory == bytes.count - Blocks.size, "every block fetched whole was served from memory")
        #expect(fs.blockCache.fetched.count == 0)
        for digest in try fs.catalog.storedBlocks(ino).values {
            #expect(fs.blobs.verify(digest), "written to the store from memory")
        }
        // Read again: from the store, nothing fetched.
        let sent = remote.state.withLock { $0.bytesSent }
        #expect(try BlockCacheTests().read(fs, ino, count: 1000, at: Int64(2 * Blocks.size)) == Array(bytes[(2 * Blocks.size)..<(2 * Blocks.size + 1000)]))
        #expect(remote.state.withLock { $0.bytesSent } == sent)
    }

    @Test func aWrongBlockIsNeverKeptInMemory() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, _) = try BlockCacheTests().onlineOnlyFile(dir, size: Blocks.size)
        let digest = try fs.catalog.storedBlocks(ino)[0]!
        remote.state.withLock { $0.corrupt[0] = 2 }
        #expect(throws: Errno.ioError) {
            _ = try fs.blockCache.descriptor(digest, length: Blocks.size, range: 0..<Blocks.size, interactive: true, whole: true, keepInMemory: true)
        }
        #expect(fs.blockCache.fetched.count == 0)
        #expect(fs.blockCache.awaitFetched(digest, 0..<100) == nil)
        #expect(!fs.blobs.contains(digest))
        // Once right, it is kept, and its bytes are the block's.
        _ = try fs.blockCache.descriptor(digest, length: Blocks.size, range: 0..<Blocks.size, interactive: true, whole: true, keepInMemory: true)
        let m = try #require(fs.blockCache.awaitFetched(digest, 0..<Blocks.size))
        #expect(BlockCache.digest(Array(m.bytes(0..<Blocks.size))) == digest)
    }

    @Test func blockingWorkersRunUpToTheirLimitAtOnceAndEndWhenIdle() throws {
        let workers = BlockingWorkers(name: "test", limit: 3, idleSeconds: 0.2)
        let running = Mutex(0)
        let peak = Mutex(0)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<6 {
            workers.run {
                let now = running.withLock { $0 += 1; return $0 }
                peak.withLock { $0 = max($0, now) }
                // Each waits until three run at once (or a second passes): jobs that block.
                let deadline = Date(timeIntervalSinceNow: 1)
                while peak.withLock({ $0 }) < 3 && Date() < deadline { usleep(1000) }
                usleep(20_000)
                running.withLock { $0 -= 1 }
                done.signal()
            }
        }
        for _ in 0..<6 { #expect(done.wait(timeout: .now() + 10) == .success) }
        #expect(peak.withLock { $0 } == 3)
        let deadline = Date(timeIntervalSinceNow: 5)
        while workers.threadCount > 0 && Date() < deadline { usleep(20_000) }
        #expect(workers.threadCount == 0)
    }
}
