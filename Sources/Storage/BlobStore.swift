import Crypto
import Synchronization
import Dispatch
import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// A content-addressed store: one file per blob at `<root>/<first two hex>/<hex>`,
/// plus a `staging/` folder for files still being written.
///
/// The store knows nothing of references: its owner (the drive's catalog, the
/// server's metadata) decides when a blob is no longer needed and calls `remove`.
/// Thread safety: every method is safe to call from any thread; the file system
/// serialises the renames. Two writers adopting the same digest both succeed and
/// leave one file.
public final class BlobStore: Sendable {
    public let root: String
    public let stagingRoot: String

    public init(root: String) throws {
        self.root = root
        self.stagingRoot = root + "/staging"
        try FileIO.makeDirectories(root)
        try FileIO.makeDirectories(stagingRoot)
    }

    public func path(for digest: SHA256Digest) -> String {
        let hex = digest.hex
        return "\(root)/\(hex.prefix(2))/\(hex)"
    }

    /// The folder holding `digest`'s file.
    public func folder(for digest: SHA256Digest) -> String { "\(root)/\(digest.hex.prefix(2))" }

    /// Which of the 256 folders are known to exist, so a new blob costs no mkdir(2).
    private let madeFolders = Mutex<Set<Substring>>([])

    /// Creates `digest`'s folder unless this process already saw it.
    public func makeFolder(for digest: SHA256Digest) throws {
        let first = digest.hex.prefix(2)
        if madeFolders.withLock({ $0.contains(first) }) { return }
        if mkdir(folder(for: digest), 0o700) != 0 && errno != EEXIST { throw Errno.current }
        madeFolders.withLock { _ = $0.insert(first) }
    }

    public func contains(_ digest: SHA256Digest) -> Bool { FileIO.exists(path(for: digest)) }

    /// The size of a stored blob, or nil when it is missing.
    public func size(of digest: SHA256Digest) -> Int64? {
        guard let st = try? FileIO.status(path(for: digest)) else { return nil }
        return Int64(st.st_size)
    }

    /// Empty staging files kept for reuse (see `takeStagingFile`), at most `spareLimit`.
    private let spares = Mutex<[(fd: Int32, path: String)]>([])
    private static let spareLimit = 32

    /// An empty staging file: a spare one when there is one, else a new one. Give it
    /// back with `returnStagingFile` when its content was not stored.
    ///
    /// Why reuse: a file whose content the store already has (a copy of a file already
    /// on the drive, a tree unpacked twice) would otherwise create an inode and free it
    /// again at once. On ext4 without a journal, every inode allocation in a block
    /// group steps over the inodes freed there in the last seconds, checking each one
    /// (`recently_deleted`); with thousands freed in the staging folder's group, that
    /// scan took a fifth of the mount's CPU while unpacking a tree (perf, Docs/benchmarks.md).
    public func takeStagingFile() throws -> (fd: Int32, path: String) {
        if let spare = spares.withLock({ $0.popLast() }) { return spare }
        return try makeStagingFile()
    }

    /// A descriptor on a memory file holding `bytes`: what a reader of a block kept in
    /// the catalog gets, so it reads like any stored block.
    public static func memoryFile(holding bytes: [UInt8]) throws -> Int32 {
        let fd = vd_memory_file("vdrive-block")
        if fd < 0 { throw Errno.current }
        do {
            try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
        } catch {
            FileIO.close(fd)
            throw error
        }
        return fd
    }

    /// Takes back a staging file whose content was not stored (the store already had
    /// it, or the write was abandoned): emptied and kept as a spare, or removed when
    /// enough are kept. A file that was linked into the store (more than one link) is
    /// never reused: it is a stored block now.
    public func returnStagingFile(fd: Int32, path: String) {
        var st = stat()
        if fstat(fd, &st) == 0, st.st_nlink == 1, ftruncate(fd, 0) == 0,
           spares.withLock({ list -> Bool in
               guard list.count < Self.spareLimit else { return false }
               list.append((fd, path))
               return true
           }) {
            return
        }
        FileIO.close(fd)
        _ = unlink(path)
    }

    /// Creates a new, empty staging file and returns its descriptor (read-write) and path.
    public func makeStagingFile() throws -> (fd: Int32, path: String) {
        let name = Hex.encode(SecureRandom.bytes(12))
        let path = "\(stagingRoot)/\(name)"
        let fd = try FileIO.open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
        return (fd, path)
    }

    /// Moves a finished staging file into the store under `digest`.
    /// Returns true when this call stored the blob, false when the store already had it
    /// (the staging file is then removed). With `durable`, the file and the folder
    /// entry are on disk before this returns.
    @discardableResult
    public func adopt(stagingPath: String, as digest: SHA256Digest, durable: Bool = false) throws -> Bool {
        let target = path(for: digest)
        if FileIO.exists(target) {
            try? FileIO.unlink(stagingPath)
            return false
        }
        let folder = folder(for: digest)
        try makeFolder(for: digest)
        if durable {
            let fd = try FileIO.open(stagingPath, O_RDONLY)
            defer { FileIO.close(fd) }
            try FileIO.fsync(fd)
        }
        // Blobs are immutable once stored: drop write permission as a guard.
        chmod(stagingPath, 0o400)
        try FileIO.rename(stagingPath, target)
        if durable { try FileIO.syncDirectory(folder) }
        return true
    }

    /// Makes a stored blob and its folder entry durable.
    public func sync(_ digest: SHA256Digest) throws {
        let fd = try FileIO.open(path(for: digest), O_RDONLY)
        defer { FileIO.close(fd) }
        try FileIO.fsync(fd)
        try FileIO.syncDirectory(folder(for: digest))
    }

    public func remove(_ digest: SHA256Digest) {
        _ = unlink(path(for: digest))
    }

    /// Removes stored blocks without making the caller wait while the disk frees them:
    /// each is renamed into the staging folder at once (gone from the store; the folder
    /// is emptied at every start, so a kill leaves nothing) and unlinked on a background
    /// thread. Freeing a 4 MiB file's extents takes about a millisecond here, and the
    /// catalog removes blocks under its lock: the 256 blocks of a deleted 1 GiB file held
    /// every request of the drive for 250 ms.
    public func removeLater(_ digests: [SHA256Digest]) {
        var doomed: [String] = []
        for d in digests {
            let trash = "\(stagingRoot)/removed-\(Hex.encode(SecureRandom.bytes(8)))"
            if Glibc.rename(path(for: d), trash) == 0 { doomed.append(trash) }
        }
        guard !doomed.isEmpty else { return }
        let paths = doomed
        DispatchQueue.global(qos: .utility).async { for p in paths { _ = unlink(p) } }
    }

    /// Opens a blob for reading.
    public func open(_ digest: SHA256Digest) throws -> Int32 {
        try FileIO.open(path(for: digest), O_RDONLY)
    }

    /// Re-reads a blob and checks that its content still has its name's hash.
    public func verify(_ digest: SHA256Digest) -> Bool {
        guard let fd = try? open(digest) else { return false }
        defer { FileIO.close(fd) }
        return (try? Self.hash(fd: fd)) == digest
    }

    /// Every digest in the store (for sweeps after an unclean stop).
    public func allDigests() throws -> [SHA256Digest] {
        var out: [SHA256Digest] = []
        for folder in try FileIO.listDirectory(root) where folder.utf8.count == 2 {
            for name in (try? FileIO.listDirectory("\(root)/\(folder)")) ?? [] {
                if let d = SHA256Digest(hex: name) { out.append(d) }
            }
        }
        return out
    }

    /// Removes every staging file (left over from a previous run).
    public func clearStaging() {
        for spare in spares.withLock({ list -> [(fd: Int32, path: String)] in defer { list.removeAll() }; return list }) {
            FileIO.close(spare.fd)
        }
        for name in (try? FileIO.listDirectory(stagingRoot)) ?? [] {
            _ = unlink("\(stagingRoot)/\(name)")
        }
    }

    /// SHA-256 of a whole file, read from the start in 1 MiB chunks.
    public static func hash(fd: Int32, upTo length: Int64? = nil) throws -> SHA256Digest {
        let hasher = SHA256Hasher()
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while true {
            var want = chunk
            if let length { want = Int(min(Int64(chunk), length - offset)) }
            if want <= 0 { break }
            let n = try FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
            if n == 0 { break }
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            offset += Int64(n)
        }
        return hasher.finish()
    }
}
