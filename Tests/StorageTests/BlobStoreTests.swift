import Testing
import Foundation
import TestSupport
import Crypto
@testable import Storage

@Suite struct BlobStoreTests {
    func stage(_ store: BlobStore, _ bytes: [UInt8]) throws -> String {
        let (fd, path) = try store.makeStagingFile()
        defer { FileIO.close(fd) }
        try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
        return path
    }

    @Test func identicalContentIsStoredOnce() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let store = try BlobStore(root: dir.path + "/blobs")
        let bytes = Array("hello photo".utf8)
        let digest = SHA256Hasher.digest(bytes)
        #expect(try store.adopt(stagingPath: try stage(store, bytes), as: digest))
        #expect(try !store.adopt(stagingPath: try stage(store, bytes), as: digest, durable: true))
        #expect(try store.allDigests() == [digest])
        #expect(try FileIO.listDirectory(store.stagingRoot).isEmpty)
        #expect(store.verify(digest))
        #expect(store.size(of: digest) == Int64(bytes.count))
        store.remove(digest)
        #expect(!store.contains(digest))
    }

    /// Staging files for writers are made ahead and taken back off the writer's path:
    /// one whose content was stored loses its staging name (the block keeps its own),
    /// one whose content was not is emptied and handed out again; clearing leaves none.
    @Test func stagingFilesAreMadeAheadAndTakenBackInTheBackground() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let store = try BlobStore(root: dir.path + "/blobs")
        let first = try store.takeStagingFile()
        #expect(try FileIO.status(first.path).st_size == 0)
        func stagingNames() throws -> Set<String> { Set(try FileIO.listDirectory(store.stagingRoot)) }
        func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
            for _ in 0..<500 where try !condition() { usleep(10_000) }
            #expect(try condition(), "\(what)")
        }
        try waitUntil("the pool is filled after the first take") { try stagingNames().count >= StagingPool.lowWater }

        // Stored: linked into the store, then given back. Only the block's name stays.
        let bytes = Array("a stored block".utf8)
        let digest = SHA256Hasher.digest(bytes)
        try bytes.withUnsafeBytes { try FileIO.pwrite(first.fd, $0, at: 0) }
        try store.makeFolder(for: digest)
        #expect(link(first.path, store.path(for: digest)) == 0)
        store.returnStagingFile(fd: first.fd, path: first.path)
        try waitUntil("the stored block's staging name is removed") { try !stagingNames().contains((first.path as NSString).lastPathComponent) }
        #expect(store.verify(digest))

        // Not stored: emptied, kept, and handed out again to a later writer.
        let second = try store.takeStagingFile()
        try Array("not stored".utf8).withUnsafeBytes { try FileIO.pwrite(second.fd, $0, at: 0) }
        store.returnStagingFile(fd: second.fd, path: second.path)
        try waitUntil("the file is emptied and kept") { (try? FileIO.status(second.path).st_size) == 0 }
        var taken: [(fd: Int32, path: String)] = []
        while taken.count < 3 * StagingPool.target, !taken.contains(where: { $0.path == second.path }) {
            taken.append(try store.takeStagingFile())
        }
        #expect(taken.contains { $0.path == second.path }, "the emptied file is handed out again")
        for f in taken { store.returnStagingFile(fd: f.fd, path: f.path) }

        store.clearStaging()
        #expect(try stagingNames().isEmpty)
    }

    @Test func verifyDetectsCorruption() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let store = try BlobStore(root: dir.path + "/blobs")
        let bytes = [UInt8](repeating: 7, count: 3_000_000)
        let digest = SHA256Hasher.digest(bytes)
        try store.adopt(stagingPath: try stage(store, bytes), as: digest)
        #expect(store.verify(digest))
        chmod(store.path(for: digest), 0o600)
        let fd = try FileIO.open(store.path(for: digest), O_WRONLY)
        try [UInt8(1)].withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 1_000_000) }
        FileIO.close(fd)
        #expect(!store.verify(digest))
    }
}
