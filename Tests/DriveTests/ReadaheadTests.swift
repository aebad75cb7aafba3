import Testing
import TestTraits
import Foundation
import Crypto
import Storage
@testable import Drive

/// Tier one: how much a read of content the drive does not hold fetches, through an
/// online-only Camera Roll file and a `Backups/` file, with a fake server that counts
/// the bytes it sends. The window starts at the chunks a read covers, doubles while the
/// reader goes on in order, reaches whole blocks, and falls back on a seek.
@Suite(.tags(.logic)) struct ReadaheadTests {
    static let KiB = 1 << 10, MiB = 1 << 20
    static let chunk = Blocks.chunkSize

    @Test func theWindowDoublesFromAChunkToWholeBlocksAndFallsBackOnASeek() {
        typealias Plan = ReadaheadWindow.Plan
        let K = Int64(Self.KiB), M = Int64(Self.MiB)
        var w = ReadaheadWindow()
        let size = 40 * M
        #expect(w.plan(offset: 0, count: 8192, size: size) == Plan(fetch: 0..<(256 * K), wholeBlocks: false))
        #expect(w.plan(offset: 8 * K, count: 8192, size: size) == Plan(fetch: 0..<(16 * K), wholeBlocks: false), "inside the window")
        #expect(w.plan(offset: 256 * K, count: 8192, size: size) == Plan(fetch: (256 * K)..<(512 * K), wholeBlocks: false))
        #expect(w.plan(offset: 512 * K, count: 8192, size: size) == Plan(fetch: (512 * K)..<M, wholeBlocks: false))
        #expect(w.plan(offset: M, count: 8192, size: size) == Plan(fetch: M..<(2 * M), wholeBlocks: false))
        #expect(w.plan(offset: 2 * M, count: 8192, size: size) == Plan(fetch: (2 * M)..<(4 * M), wholeBlocks: false))
        #expect(w.plan(offset: 4 * M, count: 8192, size: size).wholeBlocks)
        #expect(w.plan(offset: 4 * M + 8 * K, count: 8192, size: size).wholeBlocks)
        // A seek: back to the chunk the read covers, and the ramp again from there.
        #expect(w.plan(offset: 20 * M + 1000, count: 8192, size: size) == Plan(fetch: (20 * M)..<(20 * M + 256 * K), wholeBlocks: false))
        #expect(w.plan(offset: 20 * M + 256 * K, count: 8192, size: size) == Plan(fetch: (20 * M + 256 * K)..<(20 * M + 512 * K), wholeBlocks: false))
        #expect(w.plan(offset: 0, count: 8192, size: size) == Plan(fetch: 0..<(256 * K), wholeBlocks: false), "before the run: a seek")
        // Reads of a megabyte (`cat`): what they cover, until the window outgrows them.
        var big = ReadaheadWindow()
        #expect(big.plan(offset: 0, count: Self.MiB, size: size) == Plan(fetch: 0..<M, wholeBlocks: false))
        #expect(big.plan(offset: M, count: Self.MiB, size: size) == Plan(fetch: M..<(2 * M), wholeBlocks: false))
        #expect(big.plan(offset: 2 * M, count: Self.MiB, size: size) == Plan(fetch: (2 * M)..<(4 * M), wholeBlocks: false))
        #expect(big.plan(offset: 3 * M, count: Self.MiB, size: size).wholeBlocks)
        // Never past the end of the file.
        var short = ReadaheadWindow()
        #expect(short.plan(offset: 0, count: 8192, size: 300 * K) == Plan(fetch: 0..<(256 * K), wholeBlocks: false))
        #expect(short.plan(offset: 256 * K, count: 8192, size: 300 * K) == Plan(fetch: (256 * K)..<(300 * K), wholeBlocks: false))
    }

    /// Where the file is read from.
    enum Source: String, CaseIterable, CustomStringConvertible {
        case cameraRoll, backups
        var description: String { rawValue }
    }

    /// A file of pseudo-random bytes the drive does not hold, and the fake server that
    /// holds its blocks. `heldAhead`: prefetch (non-interactive) is held, so only the
    /// reader's own fetches count.
    final class Subject {
        let fs: DriveFileSystem
        let remote: FakeRemote
        let ino: UInt64
        let bytes: [UInt8]
        let cleanUp: () -> Void
        let fh: UInt64

        init(_ source: Source, size: Int, heldAhead: Bool = false) throws {
            switch source {
            case .cameraRoll:
                let dir = TemporaryDirectory()
                (fs, remote, ino, bytes) = try BlockCacheTests().onlineOnlyFile(dir, size: size)
                cleanUp = { dir.remove() }
            case .backups:
                let s = try BackupsTreeTests.Setup()
                let content = pseudoRandomBytes(size, seed: 12), server = FakeRemote()
                let digests = stride(from: 0, to: size, by: Blocks.size).map { server.add(Array(content[$0..<min(size, $0 + Blocks.size)])) }
                (bytes, remote) = (content, server)
                let hash = ContentHash.of(blocks: digests)
                s.feed.blockLists[hash] = digests
                s.feed.entries.append(.recorded(RemoteVersion(sequence: s.feed.nextSequence, device: "phone", path: "Camera Roll/V.mp4",
                                                              content: hash, size: Int64(size), captureDate: BackupsTreeTests.july2019,
                                                              mtime: 1_600_000_000, recordedAt: 1_700_000_000)))
                try s.sync()
                s.fs.blockCache.remote = server
                var folder = try s.fs.lookup(parent: 1, name: Array("Backups".utf8)).ino
                for name in ["phone", "2019", "07"] { folder = try s.fs.lookup(parent: folder, name: Array(name.utf8)).ino }
                fs = s.fs
                ino = try s.fs.lookup(parent: folder, name: Array("V.mp4".utf8)).ino
                cleanUp = { s.dir.remove() }
            }
            remote.state.withLock { $0.heldNonInteractive = heldAhead }
            fh = try fs.open(ino, writable: false, truncate: false)
        }

        deinit {
            fs.release(fh)
            cleanUp()
        }

        var sent: Int { remote.state.withLock { $0.bytesSent } }

        /// One read through the open handle, checked against the file's bytes.
        func read(_ count: Int, at offset: Int) throws {
            var out = [UInt8](repeating: 0, count: count)
            let n = try out.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: Int64(offset)) }
            let end = min(bytes.count, offset + count)
            #expect(n == end - offset && out[0..<n] == bytes[offset..<end], "the bytes at \(offset)")
        }

        /// `total` bytes from `offset` in reads of `piece` (`head -c` reads 8 KiB at a time).
        func readInOrder(_ total: Int, from offset: Int = 0, piece: Int = 8192) throws {
            for at in stride(from: offset, to: offset + total, by: piece) { try read(min(piece, offset + total - at), at: at) }
        }
    }

    @Test(arguments: Source.allCases) func onePreadOf64KiBFetchesTheChunkItCovers(_ source: Source) throws {
        let s = try Subject(source, size: 24 * Self.MiB)
        try s.read(64 * Self.KiB, at: 10 * Self.MiB + 1000)
        #expect(s.sent == Self.chunk)
    }

    /// `head -c 65536` and `head -c 1M`: a file manager sniffing a type, a thumbnailer.
    @Test(arguments: Source.allCases) func aHeaderReadIn8KiBPiecesFetchesLittleMoreThanItReads(_ source: Source) throws {
        let s = try Subject(source, size: 24 * Self.MiB)
        try s.readInOrder(64 * Self.KiB)
        #expect(s.sent == Self.chunk, "head -c 65536: \(s.sent) bytes fetched")
        try s.readInOrder(Self.MiB - 64 * Self.KiB, from: 64 * Self.KiB)
        #expect(s.sent == Self.MiB, "head -c 1M: \(s.sent) bytes fetched")
    }

    /// Reads in order from the start, 8 KiB at a time: the window doubles at each edge
    /// (256 KiB, 512 KiB, 1, 2, 4 MiB fetched), then whole blocks, one per block.
    @Test(arguments: Source.allCases) func theWindowRampsToWholeBlocks(_ source: Source) throws {
        let s = try Subject(source, size: 24 * Self.MiB, heldAhead: true)
        var edges: [Int] = []
        for at in stride(from: 0, to: 12 * Self.MiB, by: 8192) {
            let before = s.sent
            try s.read(8192, at: at)
            if s.sent != before { edges.append(at); #expect(s.sent <= max(2 * at, Self.chunk) + Blocks.size, "at \(at)") }
        }
        let K = Self.KiB, M = Self.MiB
        #expect(edges == [0, 256 * K, 512 * K, M, 2 * M, 4 * M, 8 * M])
        #expect(s.sent == 12 * M)
    }

    @Test(arguments: Source.allCases) func aSequentialReadGetsEveryByteAndFetchesItOnce(_ source: Source) throws {
        let s = try Subject(source, size: 30_000_000)
        try s.readInOrder(s.bytes.count, piece: Self.MiB)
        #expect(s.sent >= s.bytes.count && s.sent < s.bytes.count + Blocks.size, "\(s.sent) bytes for \(s.bytes.count)")
    }

    /// After a reader reached whole blocks, a seek starts again from the chunks it covers:
    /// a megabyte read in order at three other places costs a megabyte each.
    @Test(arguments: Source.allCases) func aSeekFallsBackToTheChunksTheReadCovers(_ source: Source) throws {
        let s = try Subject(source, size: 32 * Self.MiB, heldAhead: true)
        try s.readInOrder(12 * Self.MiB, piece: Self.MiB)
        let M = Self.MiB
        let ramped = s.sent
        #expect(ramped == 12 * M)
        for offset in [16 * M + Self.chunk, 21 * M, 13 * M] {
            let before = s.sent
            try s.read(8192, at: offset + 1000)
            #expect(s.sent - before == Self.chunk, "the first read after a seek to \(offset)")
            try s.readInOrder(M, from: offset)
            #expect(s.sent - before == M, "a megabyte in order from \(offset)")
        }
    }
}
