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
        /// Blocks whose next send is corrupted, whatever the order they are asked in.
        var corruptOnce: Set<SHA256Digest> = []
        var bytesSent = 0
        var requests = 0
        var chunkListRequests = 0
        /// Contents this server says it does not hold (every other one it holds).
        var lostContents: Set<SHA256Digest> = []
        var presenceChecks = 0
        var groupRequests = 0
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
            } else if s.corruptOnce.remove(hash) != nil {
                bytes[0] ^= 0xff
            }
            s.bytesSent += bytes.count
            s.requests += 1
            return .success(bytes)
        }
        return try result.get()
    }

    func wholeBlock(_ hash: SHA256Digest, into fd: Int32?, direct: Int32?, interactive: Bool,
                    piece: (UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) -> Int {
        let length = state.withLock { $0.blocks[hash]?.count } ?? 0
        let bytes = try blockBytes(hash, offset: 0, length: length, interactive: interactive)
        bytes.withUnsafeBytes { raw in
            if let fd { _ = pwrite(fd, raw.baseAddress, raw.count, 0) }
            piece(raw)
        }
        return bytes.count
    }

    /// Counts exchanges of several blocks (`groupRequests`); each block as `wholeBlock` sends it.
    func wholeBlocks(_ hashes: [SHA256Digest], interactive: Bool,
                     each: (SHA256Digest, UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) {
        state.withLock { $0.groupRequests += 1 }
        for hash in hashes {
            let length = state.withLock { $0.blocks[hash]?.count } ?? 0
            let bytes = try blockBytes(hash, offset: 0, length: length, interactive: interactive)
            bytes.withUnsafeBytes { each(hash, $0) }
        }
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

extension FakeRemote {
    func presentContents(_ contents: [SHA256Digest]) throws(RemoteFailure) -> Set<SHA256Digest> {
        let result: Result<Set<SHA256Digest>, RemoteFailure> = state.withLock { s in
            if s.down { return .failure(.unavailable("connection refused")) }
            s.presenceChecks += 1
            return .success(Set(contents).subtracting(s.lostContents))
        }
        return try result.get()
    }
}

@Suite(.tags(.logic)) struct BlockCacheTests {
    /// A drive holding one file of `size` pseudo-random bytes whose blocks were then
    /// dropped (online-only), and a fake server holding them.
    func onlineOnlyFile(_ dir: TemporaryDirectory, size: Int) throws -> (DriveFileSystem, FakeRemote, UInt64, [UInt8]) {
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(size, seed: 11)
        let a = try FileSystemLogicTests().store(fs, "video.mp4", bytes)
        let remote = FakeRemote()
        for digest in try fs.catalog.storedBlocks(a.ino).values {
            let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fs.blobs.path(for: digest))))
            #expect(remote.add(data) == digest)
            try fs.catalog.evict(digest, onlyNamedBy: [a.ino])
            #expect(!fs.blobs.contains(digest))
        }
        fs.blockCache.remote = remote
        return (fs, remote, a.ino, bytes)
    }

    /// The whole file, read in order a megabyte at a time, as `cat` does.
    func readAll(_ fs: DriveFileSystem, _ ino: UInt64) throws -> [UInt8] {
        let fh = try fs.open(ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        var got: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = try buffer.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: Int64(got.count)) }
            if n == 0 { break }
            got += buffer[0..<n]
        }
        return got
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
        let again = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try again.recover()
        again.blockCache.remote = remote
        let at = 2 * Blocks.chunkSize
        #expect(try read(again, ino, count: 1000, at: Int64(at)) == Array(bytes[at..<(at + 1000)]))
        #expect(try again.catalog.verifiedChunks(digest) == 0b101)
    }

    @Test func aWrongWholeBlockIsFetchedOnceMoreThenRefused() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: Blocks.size)
        let digest = try fs.catalog.storedBlocks(ino)[0]!
        let length = Blocks.size
        remote.state.withLock { $0.corrupt[0] = 1 }
        _ = try fs.blockCache.descriptor(digest, length: length, range: 0..<length, interactive: true, whole: true)
        #expect(fs.blockCache.statistics.digestMismatches == 1)
        #expect(fs.blobs.verify(digest))
        try fs.catalog.evict(digest, onlyNamedBy: [ino])
        remote.state.withLock { $0.corrupt[0] = 2 }
        #expect(throws: Errno.ioError) {
            _ = try fs.blockCache.descriptor(digest, length: length, range: 0..<length, interactive: true, whole: true)
        }
        #expect(!fs.blobs.contains(digest), "a wrong block never reaches the store")
        #expect(try read(fs, ino, count: 100, at: 5000) == Array(bytes[5000..<5100]))
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
        #expect(try readAll(fs, ino) == bytes)
        // The first block came in chunks (the reader's window ramping up to a block);
        // every later one whole, by the reader itself (prefetch is held).
        #expect(fs.blockCache.statistics.blocksFetched == 4)
        #expect(fs.blockCache.statistics.blocksAdopted == 5)
    }

    /// Prefetched blocks are written to the store by other threads after the reader had
    /// them; a second reader right after the first must wait for those writes, not fetch
    /// the blocks again, and every block ends up held here.
    @Test func aFileReadAgainAtOnceAfterPrefetchesIsNotFetchedTwice() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let (fs, remote, ino, bytes) = try onlineOnlyFile(dir, size: 30_000_000)
        fs.blockCache.beforeStoreWrite = { usleep(100_000) }
        #expect(try readAll(fs, ino) == bytes)
        let sent = remote.state.withLock { $0.bytesSent }
        #expect(try readAll(fs, ino) == bytes)
        #expect(remote.state.withLock { $0.bytesSent } == sent)
        #expect(sent < bytes.count + Blocks.size)
        let digests = Set(try fs.catalog.storedBlocks(ino).values)
        #expect(try fs.catalog.holdsAll(digests))
        #expect(digests.allSatisfy { fs.blobs.contains($0) })
    }

    /// Small files another device made are fetched ahead together: one exchange for
    /// hundreds of blocks. A block that fails its digest is not kept, its claim is let go,
    /// and a read fetches it the one-block way.
    @Test func smallBlocksFetchedAheadTogetherAreCheckedAndKept() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let remote = FakeRemote()
        var files: [(ino: UInt64, bytes: [UInt8], digest: SHA256Digest)] = []
        for i in 0..<300 {
            let bytes = pseudoRandomBytes(InlineBlocks.limit + 1 + i * 97, seed: UInt64(i + 1))   // past the catalog's inline blocks
            let a = try FileSystemLogicTests().store(fs, "f\(i)", bytes)
            let digest = try #require(try fs.catalog.storedBlocks(a.ino)[0])
            #expect(remote.add(bytes) == digest)
            try fs.catalog.evict(digest, onlyNamedBy: [a.ino])
            files.append((a.ino, bytes, digest))
        }
        #expect(files.allSatisfy { !fs.blobs.contains($0.digest) && (try? fs.catalog.packedBlock($0.digest)) == nil })
        fs.blockCache.remote = remote
        // One block comes wrong (named: the exchanges may be served in any order).
        remote.state.withLock { _ = $0.corruptOnce.insert(files[0].digest) }
        fs.blockCache.prefetch(files.map { ($0.digest, $0.bytes.count) })
        try eventually("299 blocks kept", within: 30) { files.filter { fs.blobs.contains($0.digest) }.count == 299 }
        // About 24 MB: three exchanges of at most 8 MiB, not 300.
        let bytes = files.map(\.bytes.count).reduce(0, +)
        #expect(remote.state.withLock { $0.groupRequests } == (bytes + BlockCache.prefetchGroupBytes - 1) / BlockCache.prefetchGroupBytes)
        #expect(fs.blockCache.statistics.digestMismatches == 1)
        let wrong = try #require(files.first { !fs.blobs.contains($0.digest) })
        #expect(wrong.digest == files[0].digest)
        for f in files { #expect(try read(fs, f.ino, count: f.bytes.count, at: 0) == f.bytes) }
        #expect(fs.blobs.contains(wrong.digest))
    }

    /// Small blocks fetched ahead go to the pack (no file, no inode each), read back
    /// byte for byte, and leave it again: made online-only under optimize storage, or
    /// evicted as cache once no file names them, their ranges freed each time.
    @Test func smallBlocksFetchedAheadGoToThePackAndLeaveIt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let remote = FakeRemote()
        let pack = dir.path + "/state/small-blocks.pack"
        func packDiskBlocks() throws -> Int64 { Int64(try FileIO.status(pack).st_blocks) }
        var files: [(ino: UInt64, bytes: [UInt8], digest: SHA256Digest)] = []
        for i in 0..<50 {
            let bytes = pseudoRandomBytes(5_000 + i * 97, seed: UInt64(i + 500))
            let a = try FileSystemLogicTests().store(fs, "s\(i)", bytes)
            let digest = try #require(try fs.catalog.storedBlocks(a.ino)[0])
            #expect(try fs.catalog.isPacked(digest))
            #expect(remote.add(bytes) == digest)
            files.append((a.ino, bytes, digest))
        }
        let held = try packDiskBlocks()
        for f in files { #expect(try fs.catalog.evict(f.digest, onlyNamedBy: [f.ino])) }
        #expect(files.allSatisfy { !fs.blobs.contains($0.digest) && (try? fs.catalog.isPacked($0.digest)) == false })
        let emptied = try packDiskBlocks()
        #expect(emptied < held / 4, "the pack holds \(emptied) disk blocks, \(held) before")

        fs.blockCache.remote = remote
        fs.blockCache.prefetch(files.map { ($0.digest, $0.bytes.count) })
        try eventually("50 blocks packed", within: 30) { files.filter { (try? fs.catalog.isPacked($0.digest)) == true }.count == 50 }
        #expect(try fs.blobs.allDigests().isEmpty, "no block file for a small block")
        #expect(fs.blockCache.statistics.blocksAdopted == 50)
        let sent = remote.state.withLock { $0.bytesSent }
        for f in files { #expect(try read(fs, f.ino, count: f.bytes.count + 10, at: 0) == f.bytes) }
        #expect(remote.state.withLock { $0.bytesSent } == sent, "read from the pack, not fetched again")

        // No file names the first one any more: it is cache, and the cache bound's eviction
        // drops its row and frees its range; the others read on.
        try fs.unlink(parent: 1, name: Array("s0".utf8))
        fs.forget(files[0].ino, count: 1)
        fs.collectGarbage()
        #expect(try fs.catalog.isPacked(files[0].digest), "kept as cache")
        #expect(try fs.catalog.evict(files[0].digest))
        #expect(try !fs.catalog.isPacked(files[0].digest))
        for f in files.dropFirst() { #expect(try read(fs, f.ino, count: f.bytes.count, at: 0) == f.bytes) }
        fs.shutdown()
    }

    /// Whether an open file may read from the server (a read-only handle on it then
    /// reads past the kernel's page cache) is told by the file's block list, which its
    /// reads use next: true while a block is online-only, false once it is back.
    @Test func anOpenFileTellsWhetherItReadsFromTheServer() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(Blocks.size + 10_000, seed: 45)
        let a = try FileSystemLogicTests().store(fs, "f", bytes)
        let digests = try fs.catalog.storedBlocks(a.ino)
        try #require(digests.count == 2)
        func readsFromTheServer() throws -> Bool {
            let reader = try fs.open(a.ino, writable: false, truncate: false)
            defer { fs.release(reader) }
            return fs.readsFromTheServer(reader)
        }
        #expect(try !readsFromTheServer())
        #expect(try fs.catalog.evict(try #require(digests[1]), onlyNamedBy: [a.ino]))
        #expect(try readsFromTheServer(), "one block of two online-only")
        let remote = FakeRemote()
        _ = remote.add(Array(bytes[Blocks.size...]))
        fs.blockCache.remote = remote
        #expect(try read(fs, a.ino, count: bytes.count, at: 0) == bytes)
        #expect(try !readsFromTheServer(), "read back: held again")
        fs.shutdown()
    }

    /// A small block whose packed bytes were found wrong (marked damaged) comes back in
    /// a group fetched ahead: kept anew at a new place in the pack, its reads right again.
    @Test func aDamagedSmallBlockFetchedAheadIsKeptAnew() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(6_000, seed: 41)
        let a = try FileSystemLogicTests().store(fs, "small", bytes)
        let digest = try #require(try fs.catalog.storedBlocks(a.ino)[0])
        let before = try #require(try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(digest, in: $0.db) })
        // What the check after an unclean stop finds: wrong bytes in the pack, marked damaged.
        try [UInt8](repeating: 0, count: 100).withUnsafeBytes { try fs.catalog.pack.write($0, at: before.offset) }
        try fs.catalog.markDamaged(digest)
        _ = try fs.recover()
        #expect(throws: Errno.ioError) { try read(fs, a.ino, count: 100, at: 0) }
        let remote = FakeRemote()
        #expect(remote.add(bytes) == digest)
        fs.blockCache.remote = remote
        fs.blockCache.prefetch([(digest, bytes.count)])
        try eventually("the block healed", within: 30) { fs.blockCache.statistics.blocksHealed == 1 }
        let after = try fs.catalog.withDatabaseUnchecked { try Catalog.packedRange(digest, in: $0.db) }
        #expect(after != nil && after != before)
        #expect(try read(fs, a.ino, count: bytes.count + 10, at: 0) == bytes)
        #expect(try fs.catalog.damagedBlocks().isEmpty)
        fs.shutdown()
    }

    @Test func aDamagedBlockIsFetchedBackFromTheServer() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        let bytes = pseudoRandomBytes(100_000, seed: 3)
        let a = try FileSystemLogicTests().store(fs, "p.jpg", bytes)
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

/// A ledger that says "done" for the paths it was given.
final class FakeLedger: ServerLedger, @unchecked Sendable {   // `done` changes only on the enforcing thread
    var done: Set<String>
    init(done: Set<String>) { self.done = done }
    func isOnServer(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws -> Bool { done.contains(path) }
    func serverLacks(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws { done.remove(path) }
}

@Suite(.tags(.logic)) struct CacheBoundTests {
    func makeFS(_ dir: TemporaryDirectory) throws -> DriveFileSystem { try FileSystemLogicTests().makeFS(dir) }

    /// Creates and closes a file; returns its attributes after the close.
    func store(_ fs: DriveFileSystem, _ name: String, in parent: UInt64 = 1, _ bytes: [UInt8]) throws -> NodeAttributes {
        try fs.getattr(try FileSystemLogicTests().store(fs, name, in: parent, bytes).ino)
    }

    @Test func fetchedBlocksBeyondTheBoundGoLeastRecentlyUsedFirst() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let remote = FakeRemote()
        fs.blockCache.remote = remote
        let blocks = (0..<3).map { pseudoRandomBytes(300_000, seed: UInt64(41 + 2 * $0)) }
        let digests = blocks.map { remote.add($0) }
        for (d, b) in zip(digests, blocks) {
            #expect(try fs.blockCache.read(d, length: b.count, at: 0, count: b.count, interactive: true) == b)
            usleep(2000)   // pacing: each block's last use a distinct moment, so the order is known
        }
        #expect(digests.allSatisfy { fs.blobs.contains($0) })
        // The first one read again: the second is now the least recently used.
        _ = try fs.blockCache.read(digests[0], length: 300_000, at: 0, count: 10, interactive: true)
        let totals = try fs.blockCache.totals()
        #expect(totals == ResidencyTotals(local: 0, cached: 900_000, onlineOnly: 0), "\(totals)")
        let dropped = try fs.blockCache.enforce(CacheBound(bytes: 650_000, optimizeStorage: false), ledger: nil)
        #expect(dropped == 300_000)
        #expect(!fs.blobs.contains(digests[1]))
        #expect(fs.blobs.contains(digests[0]) && fs.blobs.contains(digests[2]))
        // Evicted is not lost: read again through the server.
        #expect(try fs.blockCache.read(digests[1], length: 300_000, at: 1000, count: 10, interactive: true) == Array(blocks[1][1000..<1010]))
    }

    @Test func localFilesDoNotCountAgainstTheBound() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        _ = try store(fs, "local.bin", pseudoRandomBytes(1_000_000, seed: 81))
        let remote = FakeRemote()
        fs.blockCache.remote = remote
        let fetched = pseudoRandomBytes(300_000, seed: 83)
        let d = remote.add(fetched)
        _ = try fs.blockCache.read(d, length: fetched.count, at: 0, count: fetched.count, interactive: true)
        // 1.3 MB held, but only the 300 KB the server could give back count: under 500 KB.
        #expect(try fs.blockCache.enforce(CacheBound(bytes: 500_000, optimizeStorage: false), ledger: nil) == 0)
        #expect(fs.blobs.contains(d))
        #expect(try fs.blockCache.enforce(CacheBound(bytes: 100_000, optimizeStorage: false), ledger: nil) == 300_000)
        #expect(try fs.blockCache.totals() == ResidencyTotals(local: 1_000_000, cached: 0, onlineOnly: 0))
    }

    @Test func optimizeStorageDropsOnlyBackedUpUnpinnedOriginalsAndTheyReadBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8)).ino
        let photos = (0..<4).map { pseudoRandomBytes(200_000, seed: UInt64(61 + 2 * $0)) }
        let done = try store(fs, "done.jpg", in: roll, photos[0])
        let pinned = try store(fs, "pinned.jpg", in: roll, photos[1])
        let pending = try store(fs, "pending.jpg", in: roll, photos[2])
        let elsewhere = try store(fs, "notes.bin", photos[3])
        try fs.setxattr(pinned.ino, name: CacheBound.pinAttribute, value: Array("1".utf8), create: false, replace: false)
        let ledger = FakeLedger(done: ["Camera Roll/done.jpg", "Camera Roll/pinned.jpg"])
        let remote = FakeRemote()
        for p in photos { _ = remote.add(p) }
        fs.blockCache.remote = remote

        // Off: nothing a file names goes, whatever the bound.
        #expect(try fs.blockCache.enforce(CacheBound(bytes: 0, optimizeStorage: false), ledger: ledger) == 0)
        // On: only the backed-up, unpinned original.
        #expect(try fs.blockCache.enforce(CacheBound(bytes: 0, optimizeStorage: true), ledger: ledger) == 200_000)
        let blockOf = { (ino: UInt64) in try fs.catalog.storedBlocks(ino)[0]! }
        #expect(!fs.blobs.contains(try blockOf(done.ino)))
        for kept in [pinned, pending, elsewhere] { #expect(fs.blobs.contains(try blockOf(kept.ino))) }
        #expect(try fs.blockCache.totals() == ResidencyTotals(local: 600_000, cached: 0, onlineOnly: 200_000))
        // Same size and dates; reading brings it back, byte-equal.
        let after = try fs.getattr(done.ino)
        #expect(after.size == done.size && after.mtime == done.mtime && after.content == done.content)
        // st_blocks (du) counts what is on this disk: nothing while online only.
        #expect(after.stored == 0 && done.stored == 200_000)
        #expect(try fs.lookup(parent: roll, name: Array("done.jpg".utf8)).stored == 0)
        #expect(try fs.getattr(pinned.ino).stored == 200_000)
        let fh = try fs.open(done.ino, writable: false, truncate: false)
        var out = [UInt8](repeating: 0, count: 200_000)
        let n = try out.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: 0) }
        fs.release(fh)
        #expect(n == 200_000 && out == photos[0])
        #expect(try fs.getattr(done.ino).stored == 200_000, "held here again")
    }

    /// A backup marked done on a server that was since reset (or restored from an older
    /// copy) is not a backup: the original goes only when the server confirms it holds
    /// the content at that moment, and one it lacks is handed back to the backup.
    @Test func originalsGoOnlyWhenTheServerConfirmsItHoldsThem() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8)).ino
        let photos = (0..<2).map { pseudoRandomBytes(150_000, seed: UInt64(81 + $0)) }
        let kept = try store(fs, "kept.jpg", in: roll, photos[0])
        let lost = try store(fs, "lost.jpg", in: roll, photos[1])
        let ledger = FakeLedger(done: ["Camera Roll/kept.jpg", "Camera Roll/lost.jpg"])
        let bound = CacheBound(bytes: 0, optimizeStorage: true)
        let blockOf = { (ino: UInt64) in try fs.catalog.storedBlocks(ino)[0]! }

        // No server configured, then a server that does not answer: nothing goes.
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == 0)
        let remote = FakeRemote()
        for p in photos { _ = remote.add(p) }
        fs.blockCache.remote = remote
        remote.state.withLock { $0.down = true }
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == 0)
        #expect(fs.blobs.contains(try blockOf(kept.ino)))
        #expect(fs.blobs.contains(try blockOf(lost.ino)))

        // The server answers, holding one of the two: only that one goes; the other is
        // given back to the backup (no longer done) and stays.
        remote.state.withLock { $0.down = false; $0.lostContents = [lost.content!] }
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == 150_000)
        #expect(!fs.blobs.contains(try blockOf(kept.ino)))
        #expect(fs.blobs.contains(try blockOf(lost.ino)))
        #expect(ledger.done == ["Camera Roll/kept.jpg"])
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == 0)
        #expect(fs.blobs.contains(try blockOf(lost.ino)))
    }

    /// Optimize storage is not only for the Camera Roll: any file the ledger says the
    /// server holds (a synced workspace file) may go, unless it or a folder above it
    /// is pinned; a file made later in a pinned folder is pinned too.
    @Test func syncedFilesGoUnlessPinnedThemselvesOrThroughAFolder() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let docs = try fs.create(parent: 1, name: Array("Docs".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0).ino
        let keep = try fs.create(parent: docs, name: Array("Keep".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0).ino
        let files = (0..<4).map { pseudoRandomBytes(120_000, seed: UInt64(301 + $0)) }
        let synced = try store(fs, "synced.txt", in: docs, files[0])
        let pinned = try store(fs, "pinned.txt", in: docs, files[1])
        let local = try store(fs, "local.txt", in: docs, files[2])
        try fs.setxattr(pinned.ino, name: CacheBound.pinAttribute, value: Array("1".utf8), create: false, replace: false)
        try fs.setxattr(keep, name: CacheBound.pinAttribute, value: Array("1".utf8), create: false, replace: false)
        let later = try store(fs, "later.txt", in: keep, files[3])
        let ledger = FakeLedger(done: ["Docs/synced.txt", "Docs/pinned.txt", "Docs/Keep/later.txt"])
        let remote = FakeRemote()
        for f in files { _ = remote.add(f) }
        fs.blockCache.remote = remote

        #expect(try fs.blockCache.enforce(CacheBound(bytes: 0, optimizeStorage: true), ledger: ledger) == 120_000)
        let blockOf = { (ino: UInt64) in try fs.catalog.storedBlocks(ino)[0]! }
        #expect(!fs.blobs.contains(try blockOf(synced.ino)))
        for kept in [pinned, local, later] { #expect(fs.blobs.contains(try blockOf(kept.ino))) }
        // Read back whole, from the server.
        #expect(try BlockCacheTests().read(fs, synced.ino, count: 120_000, at: 0) == files[0])
    }

    /// Pinned content not held here (made online-only before the pin, or brought by the
    /// mirror) is fetched by `fetchPinned`, whole, and then stays.
    @Test func pinnedContentNotHeldHereIsFetchedAndStays() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let folder = try fs.create(parent: 1, name: Array("Offline".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0).ino
        let bytes = pseudoRandomBytes(Blocks.size + 70_000, seed: 311)
        let file = try store(fs, "two-blocks.bin", in: folder, bytes)
        let ledger = FakeLedger(done: ["Offline/two-blocks.bin"])
        let remote = FakeRemote()
        _ = remote.add(Array(bytes[0..<Blocks.size]))
        _ = remote.add(Array(bytes[Blocks.size...]))
        fs.blockCache.remote = remote
        let bound = CacheBound(bytes: 0, optimizeStorage: true)
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == Int64(bytes.count))
        #expect(try fs.blockCache.fetchPinned() == BlockCache.PinnedFetch(fetched: 0, stopped: false, more: false), "nothing pinned yet")

        // Held (paused): it stops and says so, nothing fetched.
        remote.state.withLock { $0.heldNonInteractive = true }
        try fs.setxattr(folder, name: CacheBound.pinAttribute, value: Array("1".utf8), create: false, replace: false)
        #expect(try fs.blockCache.fetchPinned().stopped)
        #expect(try fs.blockCache.totals().onlineOnly == Int64(bytes.count))

        remote.state.withLock { $0.heldNonInteractive = false }
        #expect(try fs.blockCache.fetchPinned() == BlockCache.PinnedFetch(fetched: 2, stopped: false, more: false))
        #expect(try fs.blockCache.totals() == ResidencyTotals(local: Int64(bytes.count), cached: 0, onlineOnly: 0))
        #expect(try fs.blockCache.enforce(bound, ledger: ledger) == 0, "pinned through its folder: it stays")
        remote.state.withLock { $0.down = true }
        #expect(try BlockCacheTests().read(fs, file.ino, count: bytes.count, at: 0) == bytes, "read with the server down")
    }

    @Test func aBlockPinnedByAPendingBackupIsNeverEvicted() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8)).ino
        let bytes = pseudoRandomBytes(100_000, seed: 70)
        let a = try store(fs, "a.jpg", in: roll, bytes)
        let digest = try fs.catalog.storedBlocks(a.ino)[0]!
        // What the wiring's trigger does for an item that is not done: one more reference.
        try fs.catalog.withDatabase { _ = try $0.db.run("UPDATE blocks SET refs = refs + 1 WHERE hash = ?", digest.hex) }
        let ledger = FakeLedger(done: ["Camera Roll/a.jpg"])
        #expect(try fs.blockCache.enforce(CacheBound(bytes: 0, optimizeStorage: true), ledger: ledger) == 0)
        #expect(fs.blobs.contains(digest))
    }
}

@Suite(.tags(.logic)) struct ResidencyMigrationTests {
    /// A catalog as today's main makes it (drive-001 to drive-003, shipped, never edited),
    /// with one file of two blocks, opened by this version: drive-004 adds residency, the
    /// file reads as before, and its blocks count as local.
    @Test func aCatalogFromBeforeResidencyMovesForward() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let state = dir.path + "/state"
        let bytes = pseudoRandomBytes(Blocks.size + 1000, seed: 90)
        let blocks = [Array(bytes[0..<Blocks.size]), Array(bytes[Blocks.size...])]
        let store = try BlobStore(root: state + "/blobs")
        var digests: [SHA256Digest] = []
        for b in blocks {
            let d = BlockCache.digest(b)
            let (fd, path) = try store.makeStagingFile()
            try b.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
            FileIO.close(fd)
            try store.adopt(stagingPath: path, as: d)
            digests.append(d)
        }
        do {
            let db = try Database(path: state + "/catalog.sqlite")
            try db.migrate(Array(CatalogSchema.migrations.prefix(3)))
            #expect(try db.appliedMigrations() == ["drive-001-catalog", "drive-002-blocks", "drive-003-drop-blobs"])
            let dirMode = UInt32(S_IFDIR) | 0o755, fileMode = UInt32(S_IFREG) | 0o644
            try db.run("INSERT INTO inodes(ino, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns) VALUES (1, ?, 0, 0, 3, 0, 0, 0), (2, ?, 0, 0, 2, 0, 0, 0)", dirMode, dirMode)
            try db.run("INSERT INTO entries(parent, name, ino) VALUES (1, ?, 2)", Array("Camera Roll".utf8))
            try db.run("INSERT INTO inodes(ino, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, content, stored) VALUES (3, ?, 0, 0, ?, 1, 0, 0, 0, ?, ?)",
                       fileMode, bytes.count, ContentHash.of(blocks: digests).hex, bytes.count)
            try db.run("INSERT INTO entries(parent, name, ino) VALUES (1, ?, 3)", Array("big.bin".utf8))
            for (i, d) in digests.enumerated() {
                try db.run("INSERT INTO blocks(hash, size, refs, gen) VALUES (?, ?, 0, 1)", d.hex, blocks[i].count)
                try db.run("INSERT INTO file_blocks(ino, idx, hash) VALUES (3, ?, ?)", i, d.hex)
            }
            try db.run("INSERT INTO drive_meta(key, value) VALUES ('created_ns', 0), ('clean_unmount', 1)")
        }
        let fs = try DriveFileSystem.workspace(statePath: state)
        _ = try fs.recover()
        #expect(try fs.catalog.withDatabase { try $0.db.appliedMigrations() }.contains("drive-004-residency"))
        #expect(try fs.blockCache.totals() == ResidencyTotals(local: Int64(bytes.count), cached: 0, onlineOnly: 0))
        let fh = try fs.open(3, writable: false, truncate: false)
        var out = [UInt8](repeating: 0, count: bytes.count)
        let n = try out.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: 0) }
        fs.release(fh)
        #expect(n == bytes.count && out == bytes)
    }
}
