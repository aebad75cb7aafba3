import Testing
import TestTraits
import Foundation
import TestSupport
import Crypto
@testable import Storage

@Suite(.tags(.logic)) struct BlobStoreTests {
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
