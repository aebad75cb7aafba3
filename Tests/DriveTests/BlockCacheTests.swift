import Testing
import Foundation
import Synchronization
import Crypto
import Storage
@testable import Drive

/// A server in memory for the block cache's logic: serves blocks it was given, counts
/// what it sends, and can be down or send wrong bytes.
final class FakeRemote: RemoteContent, @unchecked Sendable {
    struct State {
        var blocks: [SHA256Digest: [UInt8]] = [:]
        var down = false
        var heldNonInteractive = false
        /// Chunk offsets whose next `n` sends are corrupted (one byte flipped).
        var corrupt: [Int: Int] = [:]
        var bytesSent = 0
        var requests = 0
        var chunkListRequests = 0
    }
    let state = Mutex(State())

    func add(_ bytes: [UInt8]) -> SHA256Digest {
        let d = BlockCache.digest(bytes)
        state.withLock { $0.blocks[d] = bytes }
        return d
    }

    func blockBytes(_ hash: SHA256Digest, offset: Int, length: Int, interactive: Bool) throws(RemoteFailure) -> [UInt8] {
        let result: Result<[UInt8], RemoteFailure> = state.withLock { s in
            if s.down { return .failure(.unavailable("connection refused")) }
            if s.heldNonInteractive && !interactive { return .failure(.held("paused")) }
            guard let block = s.blocks[hash] else { return .failure(.missing("404")) }
            var bytes = Array(block[offset..<min(block.count, offset + length)])
            if let n = s.corrupt[offset], n > 0 {
                s.corrupt[offset] = n - 1
                bytes[0] ^= 0xff
            }
            s.bytesSent += bytes.count
            s.requests += 1
            return .success(bytes)
        }
        return try result.get()
    }

    func chunkDigests(_ hash: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest] {
        let result: Result<[SHA256Digest], RemoteFailure> = state.withLock { s in
            if s.down { return .failure(.unavailable("connection refused")) }
            guard let block = s.blocks[hash] else { return .failure(.missing("404")) }
            s.chunkListRequests += 1
            return .success(stride(from: 0, to: block.count, by: Blocks.chunkSize).map {
                BlockCache.digest(Array(block[$0..<min(block.count, $0 + Blocks.chunkSize)]))
            })
        }
        return try result.get()
    }
}

@Suite struct BlockCacheTests {
    /// A drive holding one file of `size` pseudo-random bytes whose blocks were then
    /// dropped (online-only), and a fake server holding them.
    func onlineOnlyFile(_ dir: TemporaryDirectory, size: Int) throws -> (DriveFileSystem, FakeRemote, UInt64, [UInt8]) {
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(size, seed: 11)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("video.mp4".utf8), mode: 0o644, uid: 0, gid: 0)
        _ = try bytes.withUnsafeBytes { try fs.write(fh, $0, at: 0) }
        try fs.flush(fh)
        fs.release(fh)
        let remote = FakeRemote()
        for digest in try fs.catalog.storedBlocks(a.ino).values {
            let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fs.blobs.path(for: digest))))
            #expect(remote.add(data) == digest)
            try fs.catalog.evict(digest)
            #expect(!fs.blobs.contains(digest))
        }
        fs.blockCache.remote = remote
        return (fs, remote, a.ino, bytes)
    }

    func read(_ fs: DriveFileSystem, _ ino: UInt64, count: Int, at offset: Int64) throws -> [UInt8] {
        let fh = try fs.open(ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        var out = [UInt8](repeating: 0, count: count)
        let n = try out.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: offset) }
        return Array(out[0..<n])
    }

    @Test func aPartialReadFetchesOnlyTheChunksCoveringIt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 10_000_000)
        let offset = 5 * 1024 * 1024 + 1000
        let got = try read(fs, ino, count: 64 * 1024, at: Int64(offset))
        #expect(got == Array(bytes[offset..<(offset + 64 * 1024)]))
        #expect(remote.state.withLock { $0.bytesSent } == Blocks.chunkSize)
        // Read again: served from the partial file, nothing fetched.
        #expect(try read(fs, ino, count: 64 * 1024, at: Int64(offset)) == got)
        #expect(remote.state.withLock { $0.bytesSent } == Blocks.chunkSize)
        #expect(remote.state.withLock { $0.chunkListRequests } == 1)
    }

    @Test func aBlockWhoseChunksAllArrivedIsAdoptedIntoTheStore() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, _, ino, bytes) = try onlineOnlyFile(dir, size: 5_000_000)
        let blocks = try fs.catalog.storedBlocks(ino)
        // Reads at offset 0 are not sequential: chunk by chunk through the second block.
        for start in stride(from: 0, to: 5_000_000 - Blocks.size, by: Blocks.chunkSize) {
            let off = Blocks.size + start
            _ = try read(fs, ino, count: min(Blocks.chunkSize, 5_000_000 - off), at: Int64(off))
        }
        #expect(fs.blobs.contains(blocks[1]!))
        #expect(!fs.blobs.contains(blocks[0]!))
        #expect(try read(fs, ino, count: 5_000_000, at: 0) == bytes)
        #expect(fs.blockCache.statistics.blocksAdopted == 2)
    }

    @Test func aCorruptChunkIsFetchedAgainAndNeverServed() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 1_000_000)
        remote.state.withLock { $0.corrupt[0] = 1 }
        #expect(try read(fs, ino, count: 1000, at: 0) == Array(bytes[0..<1000]))
        #expect(fs.blockCache.statistics.digestMismatches == 1)

        remote.state.withLock { $0.corrupt[Blocks.chunkSize] = 2 }
        #expect(throws: Errno.ioError) { try read(fs, ino, count: 1000, at: Int64(Blocks.chunkSize)) }
        // Nothing of that chunk was recorded: a later read fetches it and gets the truth.
        #expect(try fs.catalog.verifiedChunks(try fs.catalog.storedBlocks(ino)[0]!) == 1)
        #expect(try read(fs, ino, count: 1000, at: Int64(Blocks.chunkSize)) == Array(bytes[Blocks.chunkSize..<(Blocks.chunkSize + 1000)]))
    }

    @Test func bytesWrittenToAPartialFileButNotRecordedAreNeverServed() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 1_000_000)
        _ = try read(fs, ino, count: 10, at: 0)
        let digest = try fs.catalog.storedBlocks(ino)[0]!
        // A kill between a chunk's write and its record: the bytes are there, the record
        // is not. Simulate with garbage where chunk 2 goes, then a fresh mount.
        let fd = try FileIO.open(fs.blockCache.partialPath(digest), O_RDWR)
        try [UInt8](repeating: 0xAB, count: 1000).withUnsafeBytes { try FileIO.pwrite(fd, $0, at: Int64(2 * Blocks.chunkSize)) }
        FileIO.close(fd)
        fs.shutdown()
        let again = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try again.recover()
        again.blockCache.remote = remote
        let at = 2 * Blocks.chunkSize
        #expect(try read(again, ino, count: 1000, at: Int64(at)) == Array(bytes[at..<(at + 1000)]))
        #expect(try again.catalog.verifiedChunks(digest) == 0b101)
    }

    @Test func serverDownFailsWithEIOAndReadsWorkWhenItIsBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 1_000_000)
        remote.state.withLock { $0.down = true }
        #expect(throws: Errno.ioError) { try read(fs, ino, count: 1000, at: 0) }
        #expect(throws: Errno.ioError) { try read(fs, ino, count: 1000, at: 0) }
        remote.state.withLock { $0.down = false }
        #expect(try read(fs, ino, count: 1000, at: 0) == Array(bytes[0..<1000]))
    }

    @Test func sequentialReadsFetchWholeBlocksAndPrefetchIsHeldByPolicy() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 20_000_000)
        remote.state.withLock { $0.heldNonInteractive = true }
        let fh = try fs.open(ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        var got: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while got.count < bytes.count {
            let n = try buffer.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: Int64(got.count)) }
            if n == 0 { break }
            got += buffer[0..<n]
        }
        #expect(got == bytes)
        // The first read (at 0) fetched chunks; every later one is sequential and fetched its block whole, by the reader itself (prefetch is held).
        #expect(fs.blockCache.statistics.blocksFetched == 5)
    }

    @Test func aDamagedBlockIsFetchedBackFromTheServer() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(100_000, seed: 3)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("p.jpg".utf8), mode: 0o644, uid: 0, gid: 0)
        _ = try bytes.withUnsafeBytes { try fs.write(fh, $0, at: 0) }
        try fs.flush(fh)
        fs.release(fh)
        let digest = try fs.catalog.storedBlocks(a.ino)[0]!
        let remote = FakeRemote()
        _ = remote.add(bytes)
        // What the check after an unclean stop finds: a wrong block file, marked damaged.
        chmod(fs.blobs.path(for: digest), 0o600)
        let fd = try FileIO.open(fs.blobs.path(for: digest), O_RDWR)
        try [UInt8](repeating: 0, count: 100).withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
        FileIO.close(fd)
        try fs.catalog.markDamaged(digest)
        _ = try fs.recover()
        #expect(throws: Errno.ioError) { try read(fs, a.ino, count: 100, at: 0) }
        fs.blockCache.remote = remote
        #expect(try read(fs, a.ino, count: 100_000, at: 0) == bytes)
        #expect(fs.blockCache.statistics.blocksHealed == 1)
        #expect(fs.blobs.verify(digest))
        #expect(try fs.catalog.damagedBlocks().isEmpty)
    }
}
