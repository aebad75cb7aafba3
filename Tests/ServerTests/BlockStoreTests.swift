import Crypto
import Foundation
import ObjectStore
import Protocol
@testable import Server
import Storage
import Testing

/// The server's two block stores side by side, through the one protocol its handlers
/// use: the data folder's `blobs/` (embedded) and an S3 bucket on a real SeaweedFS
/// (scaled). Each is given the same block and must give the same answers back.
@Suite(.tags(.endToEnd), .serialized) struct BlockStoreTests {
    /// A store of `backend`'s kind in a fresh folder (scaled: on a fresh SeaweedFS).
    /// `stop()` on every path.
    final class Opened {
        let dir = TemporaryDirectory("vdrive-blockstore")
        let weed: SeaweedFS?
        let store: any BlockStore

        init(_ backend: Backend) throws {
            var started: SeaweedFS?
            do {
                switch backend {
                case .embedded:
                    store = try FolderBlocks(try BlobStore(root: dir.path + "/blobs"))
                case .scaled:
                    let weed = try SeaweedFS(folder: dir.path + "/seaweed")
                    started = weed
                    let location = try S3Location.parse(weed.storeURL)
                    let objects = ObjectBlocks(store: S3Store(location: location, credentials: S3Credentials(accessKey: weed.accessKey, secretKey: weed.secretKey)))
                    try objects.prepare()
                    store = objects
                }
                weed = started
            } catch {
                started?.stop()
                dir.remove()
                throw error
            }
        }

        func stop() { weed?.stop(); dir.remove() }

        /// Stores `bytes` under `digest` as a checked upload is stored: staged in a file the store takes.
        func adopt(_ bytes: [UInt8], as digest: SHA256Digest) throws {
            let path = dir.path + "/staged-" + digest.hex
            let fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
            try #require(fd >= 0)
            defer { close(fd) }
            try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
            try store.adopt(stagingPath: path, fd: fd, as: digest)
            #expect(!FileManager.default.fileExists(atPath: path), "the store took the staging file")
        }

        /// The block's bytes as `read` streams them, nil when the store has no such block.
        func read(_ digest: SHA256Digest) throws -> [UInt8]? {
            let box = Box()
            guard let count = try store.read(digest, { box.bytes.append(contentsOf: $0) }) else { return nil }
            #expect(count == Int64(box.bytes.count))
            return box.bytes
        }
    }

    /// `@unchecked Sendable`: filled by the one thread reading a block.
    final class Box: @unchecked Sendable { var bytes: [UInt8] = [] }

    /// The bytes of an opened block, read in pieces of `piece` bytes.
    static func drain(_ block: OpenBlock, piece: Int = 300_000) -> [UInt8] {
        var out: [UInt8] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: piece, alignment: 16)
        defer { buffer.deallocate() }
        while let n = block.read(into: buffer, at: out.count), n > 0 { out += buffer[0..<n] }
        return out
    }

    @Test(arguments: Backend.allCases)
    func aBlockIsStoredHeldReadBackAndRemoved(_ backend: Backend) throws {
        let opened = try Opened(backend)
        defer { opened.stop() }
        let store = opened.store
        // Longer than the 1 MiB pieces a file is streamed in, shorter than a block.
        let bytes = randomBytes(1_500_000, seed: 41)
        let digest = SHA256Hasher.digest(bytes)
        let other = SHA256Hasher.digest(randomBytes(1000, seed: 42))

        #expect(try !store.holds(digest))
        #expect(try store.firstLacking([digest]) == digest)
        #expect(try opened.read(digest) == nil)
        #expect(store.open(digest, length: bytes.count) == nil)
        #expect(store.unrecorded(digest) == nil)

        try opened.adopt(bytes, as: digest)
        #expect(try store.holds(digest))
        #expect(try store.firstLacking([digest]) == nil)
        #expect(try store.firstLacking([digest, other, digest]) == other)
        #expect(try opened.read(digest) == bytes)
        let block = try #require(store.open(digest, length: bytes.count))
        #expect(Self.drain(block) == bytes)
        block.close()
        let records = [PackRecord(index: 0, digest: digest, length: bytes.count), PackRecord(index: 1, digest: digest, length: bytes.count)]
        let feed = store.feed(records)
        for i in records.indices {
            let fed = try #require(feed.block(i), "record \(i)")
            #expect(Self.drain(fed) == bytes)
            fed.close()
        }
        feed.close()

        switch backend {
        case .embedded:
            // Blocks pass through the server: kept as files, sent by sendfile; one found
            // without its row (a kill before the row) is checked and counted.
            #expect(store.presigned == nil)
            let file = try #require(try store.file(digest))
            #expect(file.start == 0)
            close(file.fd)
            #expect(store.unrecorded(digest) == Int64(bytes.count))
        case .scaled:
            // Devices reach the store: no files; an object without its row is an
            // unverified PUT, counted only by a verification, and listed for the collection.
            #expect(try store.file(digest) == nil)
            #expect(store.unrecorded(digest) == nil)
            let presigned = try #require(store.presigned)
            #expect(try presigned.verify(digest) == .verified(size: Int64(bytes.count)))
            #expect(try presigned.verify(other) == .absent)
            let page = try presigned.page(after: nil)
            #expect(page.blocks.map(\.digest) == [digest] && page.blocks.first?.size == Int64(bytes.count) && !page.more)
            #expect(page.blocks.first?.modified != nil)
            #expect(presigned.downloadURL(digest, expiresIn: 60).contains("/blocks/" + digest.hex + "?"))
        }

        try store.remove(digest)
        #expect(try !store.holds(digest))
        #expect(try opened.read(digest) == nil)
        try store.remove(digest)  // already gone: fine
    }

    /// Bytes stored under a name they do not hash to never count: the folder's check of
    /// a block found without its row and an object store's verification both remove them.
    @Test(arguments: Backend.allCases)
    func bytesThatAreNotTheBlockAreRemoved(_ backend: Backend) throws {
        let opened = try Opened(backend)
        defer { opened.stop() }
        let store = opened.store
        let bytes = randomBytes(70_000, seed: 43)
        let named = SHA256Hasher.digest(randomBytes(70_000, seed: 44))
        try opened.adopt(bytes, as: named)
        #expect(try store.holds(named))
        if let presigned = store.presigned {
            #expect(try presigned.verify(named) == .mismatch(actual: SHA256Hasher.digest(bytes), size: Int64(bytes.count)))
        } else {
            #expect(store.unrecorded(named) == nil)
        }
        #expect(try !store.holds(named))
    }

    /// Blocks that came in packs live in the folder store's pack file: found, read in
    /// pieces, sent by sendfile from their range, and punched when removed.
    @Test func packedBlocksAreReadFromTheirRangeAndPunchedWhenRemoved() throws {
        let opened = try Opened(.embedded)
        defer { opened.stop() }
        let store = try #require(opened.store as? FolderBlocks)
        let first = randomBytes(10_000, seed: 51), second = randomBytes(300_000, seed: 52)
        let digests = [SHA256Hasher.digest(first), SHA256Hasher.digest(second)]
        try store.takeForServing()
        let pack = try store.packed.appending()
        #expect(pack.number == 1)
        let offsets = try [first, second].map { bytes in try bytes.withUnsafeBytes { try pack.file.append($0) } }
        #expect(offsets[1] == 12_288, "each block starts on a 4 KiB boundary")
        #expect(try store.firstLacking(digests) == digests[0])
        #expect(try store.packed.index([(digests[0], offsets[0], first.count), (digests[1], offsets[1], second.count)]).isEmpty)
        #expect(try store.packed.index([(digests[1], 999_424, second.count)]) == [0], "a block indexed already keeps its range")
        #expect(try store.firstLacking(digests) == nil)
        #expect(try opened.read(digests[1]) == second)
        let block = try #require(store.open(digests[1], length: second.count))
        #expect(Self.drain(block, piece: 65_536) == second)
        let file = try #require(try store.file(digests[1]))
        #expect(file.start == offsets[1])
        var sent = [UInt8](repeating: 0, count: second.count)
        #expect(pread(file.fd, &sent, second.count, off_t(file.start)) == second.count && sent == second)
        close(file.fd)
        #expect(store.unrecorded(digests[0]) == 10_000)

        let path = opened.dir.path + "/blobs/packs/1.pack"
        let before = try FileIO.status(path).st_blocks
        try store.remove(digests[1])
        #expect(try !store.holds(digests[1]) && store.holds(digests[0]))
        #expect(try opened.read(digests[1]) == nil)
        #expect(try FileIO.status(path).st_blocks < before - 500, "the removed block's range is punched")
        #expect(try opened.read(digests[0]) == first)
    }
}
