import Crypto
import Protocol
import Storage

/// The blocks of an embedded server, in `blobs/` of the data folder: those that came in
/// block packs in its pack file (`PackedBlocks`), those sent one by one (tus, a
/// whole-block PUT) one file each (Storage's `BlobStore`, which the drive uses too). A
/// block is staged, checked and made durable before its row is written. Downloads are
/// sent from the files and the pack.
final class FolderBlocks: BlockStore {
    let files: BlobStore
    let packed: PackedBlocks

    init(_ files: BlobStore) throws {
        self.files = files
        packed = try PackedBlocks(root: files.root)
    }

    func holds(_ digest: SHA256Digest) throws -> Bool { try packed.range(digest) != nil || files.contains(digest) }

    func firstLacking(_ digests: [SHA256Digest]) throws -> SHA256Digest? { try digests.first { try !holds($0) } }

    func read(_ digest: SHA256Digest, _ consumer: @escaping (UnsafeRawBufferPointer) -> Void) throws -> Int64? {
        if let range = try packed.range(digest) {
            let bytes = try packed.read(range)
            bytes.withUnsafeBytes { consumer($0) }
            return Int64(bytes.count)
        }
        let fd: Int32
        do { fd = try files.open(digest) } catch let error as Errno where error == .noSuchFileOrDirectory { return nil }
        defer { FileIO.close(fd) }
        return try FileIO.stream(fd, to: consumer)
    }

    /// Its range of the pack, or its file whatever its length: a short one ends the reply short.
    func open(_ digest: SHA256Digest, length: Int) -> OpenBlock? {
        if let range = try? packed.range(digest), let file = try? packed.file(range.pack) { return .packed(file, start: range.offset, length: range.length) }
        return (try? files.open(digest)).map(OpenBlock.file)
    }

    func file(_ digest: SHA256Digest) throws -> (fd: Int32, start: Int64)? {
        if let range = try packed.range(digest) { return (try packed.file(range.pack).duplicateDescriptor(), range.offset) }
        return (try files.open(digest), 0)
    }

    func feed(_ records: [PackRecord]) -> any BlockFeed { BlockByBlock(records, store: self) }

    /// fdatasync, rename into place, sync the folder.
    func adopt(stagingPath: String, fd: Int32, as digest: SHA256Digest) throws {
        try FileIO.fdatasync(fd)
        try files.adopt(stagingPath: stagingPath, as: digest, durable: true)
    }

    func remove(_ digest: SHA256Digest) throws {
        try packed.remove(digest)
        files.remove(digest)
    }

    func unrecorded(_ digest: SHA256Digest) -> Int64? {
        if let range = try? packed.range(digest) {
            guard let bytes = try? packed.read(range), SHA256Hasher.digest(bytes) == digest else {
                _ = try? packed.remove(digest)
                return nil
            }
            return Int64(range.length)
        }
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

    func takeForServing() throws {
        try packed.takePackForWriting()
    }

    func packStaging(context: ServerContext) -> any PackStaging { FolderPackStaging(context: context, store: self) }

    var presigned: (any PresignedBlocks)? { nil }
}
