import Crypto
import Protocol
import Storage

/// The blocks of an embedded server: one file each in `blobs/` of the data folder
/// (Storage's `BlobStore`, which the drive uses too). Every block arrives through the
/// server (tus, a whole-block PUT, a pack): it is staged in the store's `staging/`
/// folder, checked, synced and renamed into place before its row is written. Downloads
/// are sent from the files.
final class FolderBlocks: BlockStore {
    let files: BlobStore

    init(_ files: BlobStore) { self.files = files }

    func holds(_ digest: SHA256Digest) -> Bool { files.contains(digest) }

    func firstLacking(_ digests: [SHA256Digest]) -> SHA256Digest? { digests.first { !files.contains($0) } }

    func read(_ digest: SHA256Digest, _ consumer: @escaping (UnsafeRawBufferPointer) -> Void) throws -> Int64? {
        let fd: Int32
        do { fd = try files.open(digest) } catch let error as Errno where error == .noSuchFileOrDirectory { return nil }
        defer { FileIO.close(fd) }
        return try FileIO.stream(fd, to: consumer)
    }

    /// The file, whatever its length: a short one ends the reply short.
    func open(_ digest: SHA256Digest, length: Int) -> OpenBlock? { (try? files.open(digest)).map(OpenBlock.file) }

    func file(_ digest: SHA256Digest) throws -> Int32? { try files.open(digest) }

    func feed(_ records: [PackRecord]) -> any BlockFeed { BlockByBlock(records, store: self) }

    /// fdatasync, rename into place, sync the folder.
    func adopt(stagingPath: String, fd: Int32, as digest: SHA256Digest) throws {
        try FileIO.fdatasync(fd)
        try files.adopt(stagingPath: stagingPath, as: digest, durable: true)
    }

    func remove(_ digest: SHA256Digest) { files.remove(digest) }

    func unrecorded(_ digest: SHA256Digest) -> Int64? {
        guard files.contains(digest) else { return nil }
        guard files.verify(digest), let size = files.size(of: digest), size <= Int64(Blocks.size) else {
            files.remove(digest)
            return nil
        }
        return size
    }

    /// Streamed into a fresh staging file, hashed on the way.
    func putBody(_ digest: SHA256Digest, length: Int64, context: ServerContext) throws -> any RequestBody {
        let staging = try files.makeStagingFile()
        return PutBody(context: context, digest: digest, length: length, fd: staging.fd, path: staging.path)
    }

    func packStaging(context: ServerContext) -> any PackStaging { FolderPackStaging(context: context, store: files) }

    var presigned: (any PresignedBlocks)? { nil }
}
