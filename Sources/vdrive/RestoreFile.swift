import Client
import Crypto
import Protocol
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Why one file was not restored. `transient`: running the restore again can help.
enum RestoreFailure: Error, Equatable {
    /// The server answered 5xx, 408 or 429, or the transfer broke off.
    case transient(String)
    /// The server could not be reached (refused, timed out): the files after this one
    /// are not tried, as each would wait for the same timeout.
    case serverGone(String)
    /// The server does not hold the content, or sent bytes that are not it.
    case server(String)
    /// DEST could not be written, or holds another file under that name.
    case local(String)

    var message: String {
        switch self {
        case .transient(let m), .serverGone(let m), .server(let m), .local(let m): return m
        }
    }
}

/// A file being fetched: its temporary file is open and its blocks are handed out to
/// the transfer threads (RestoreTransfers); the thread that settles the last block
/// completes or abandons it.
final class FileInFlight: Sendable {
    let record: FileRecord
    let final: String
    let temporary: String
    let fd: Int32
    /// The same file opened with O_DIRECT: fetched blocks are written past the page
    /// cache (nil where the file system refuses it).
    let direct: Int32?
    let manifest: BlockManifest
    /// The temporary file's size before this run: a killed run may have left verified
    /// blocks below it.
    let leftBehind: Int64

    struct State {
        var remaining: Int
        var downloaded: Int64 = 0
        /// Bytes of this file counted in the progress line so far.
        var accounted: Int64 = 0
        var failure: RestoreFailure?
    }
    let state: Mutex<State>

    init(record: FileRecord, final: String, temporary: String, fd: Int32, direct: Int32?, manifest: BlockManifest, leftBehind: Int64) {
        self.record = record; self.final = final; self.temporary = temporary; self.fd = fd; self.direct = direct
        self.manifest = manifest; self.leftBehind = leftBehind
        state = Mutex(State(remaining: manifest.blocks.count))
    }

    func close() {
        FileIO.close(fd)
        if let direct { FileIO.close(direct) }
    }
}

/// Restores one file of a device's backup to `DEST/<its path>`, in three steps that
/// several threads may share: `prepare` (is it there already? open the temporary file),
/// `block` (one block fetched or kept, any thread, any order), `complete`.
///
/// Kill safety and resume: bytes go to a hidden temporary file next to the final
/// name, `.<name>.<content hash prefix>.vdrive-restore`, which is renamed into place
/// only when every block of it has been verified and the file is on disk (fdatasync),
/// so a file under its final name is always complete. Named by content, a temporary
/// file only ever holds blocks of that content at their places: a rerun hashes the
/// blocks a killed run left there (skipping holes, which were never written) and
/// fetches only the others, so a big file resumes by block. A final file whose size
/// and content hash match is not fetched again.
///
/// Verification: the manifest (`contentBlocks`) is checked to hash to the content
/// hash, each block fetched whole (`downloadBlock`) is checked against its block hash
/// as it streams, each block kept from a killed run is hashed from the disk, and zero
/// blocks are holes, never fetched. Together that proves the temporary file holds
/// exactly the content (the file's SHA-256 content hash) before it is renamed, without
/// reading it a second time.
struct FileRestorer: Sendable {
    enum Preparation {
        /// Already at DEST with the right bytes; nothing to fetch.
        case alreadyThere
        /// The temporary file is open: settle each of its blocks, then `complete`.
        case fetch(FileInFlight)
    }

    enum BlockOutcome: Equatable {
        /// A block of zeros: a hole in the file, nothing fetched.
        case hole
        /// Left by a killed run, and its bytes hash to it.
        case kept
        case fetched(Int64)
    }

    let client: WorkspaceClient
    let destination: String

    /// The final path of a record under DEST. Paths come from the server, which checks
    /// them, but are checked again here: a `..` must never write outside DEST.
    func finalPath(_ record: FileRecord) throws(RestoreFailure) -> String {
        do { return destination + "/" + (try Validation.path(record.path)) } catch {
            throw .server("the server listed a path that cannot be restored safely ('\(record.path)'): \(error.message)")
        }
    }

    func prepare(_ record: FileRecord) throws(RestoreFailure) -> Preparation {
        let final = try finalPath(record)
        guard let content = SHA256Digest(hex: record.hash) else { throw .server("'\(record.path)' has no valid content hash ('\(record.hash)')") }
        if let st = try? FileIO.status(final) {
            guard (st.st_mode & S_IFMT) == S_IFREG, Int64(st.st_size) == record.size, (try? Self.contentHash(of: final, size: record.size)) == content else {
                throw .local("\(final) exists and is not this backup; it was left as it is: move it away (or restore into another folder) and run again")
            }
            Self.setTimes(final, RestoreSelection.date(of: record))
            return .alreadyThere
        }
        let folder = Self.folder(of: final)
        let name = String(final[final.index(after: final.lastIndex(of: "/")!)...])
        do { try FileIO.makeDirectories(folder, mode: 0o755) } catch { throw .local("cannot create the folder \(folder): \(error)") }
        let temporary = folder + "/." + name + "." + content.hex.prefix(16) + ".vdrive-restore"

        let manifest: BlockManifest
        do { manifest = try client.contentBlocks(content) } catch { throw Self.failure(error, record) }
        guard manifest.size == record.size else { throw .server("the server's content of '\(record.path)' is \(manifest.size) bytes, its record says \(record.size)") }

        let fd: Int32
        do { fd = try FileIO.open(temporary, O_RDWR | O_CREAT, 0o644) } catch { throw .local("cannot write \(temporary): \(error)") }
        do {
            let had = Int64(try FileIO.status(fd).st_size)
            // Exactly the size: holes read as zeros, which is what zero blocks are.
            try FileIO.ftruncate(fd, record.size)
            return .fetch(FileInFlight(record: record, final: final, temporary: temporary, fd: fd, direct: FileIO.openDirectForWriting(temporary),
                                       manifest: manifest, leftBehind: min(had, record.size)))
        } catch {
            FileIO.close(fd)
            throw .local("cannot write \(temporary): \(error)")
        }
    }

    /// Settles block `index` of `file`: a hole, kept from a killed run, or fetched and
    /// verified. `progress` gets the bytes of this block received so far.
    func block(_ index: Int, of file: FileInFlight, progress: @escaping (Int64) -> Bool) throws(RestoreFailure) -> BlockOutcome {
        let length = file.manifest.length(ofBlock: index)
        let offset = Int64(index) * Int64(Blocks.size)
        let hash = file.manifest.blocks[index]
        if file.manifest.isZero(index) { return .hole }
        if offset + Int64(length) <= file.leftBehind, Self.holdsData(file.fd, offset: offset, length: length),
           (try? RangeHash.block(fd: file.fd, offset: offset, length: length)) == hash {
            return .kept
        }
        do {
            let fetched = try client.downloadBlock(hash, to: file.fd, at: offset, direct: file.direct, progress: progress)
            // Through the page cache (no O_DIRECT here, or the block's last bytes): start
            // writing it back now, without waiting; `complete`'s fdatasync has little left.
            FileIO.startWriteback(file.fd, offset: offset, length: Int64(length))
            return .fetched(fetched)
        } catch {
            throw Self.failure(error, file.record)
        }
    }

    /// Every block is settled: the file goes to disk, gets its date, takes its name.
    func complete(_ file: FileInFlight) throws(RestoreFailure) {
        defer { file.close() }
        do { try FileIO.fdatasync(file.fd) } catch { throw .local("cannot write \(file.temporary): \(error)") }
        Self.setTimes(file.temporary, RestoreSelection.date(of: file.record))
        do { try FileIO.rename(file.temporary, file.final) } catch { throw .local("cannot rename \(file.temporary) to \(file.final): \(error)") }
    }

    /// A block failed: the temporary file stays (its verified blocks serve the next run).
    func abandon(_ file: FileInFlight) { file.close() }

    static func folder(of path: String) -> String { String(path[..<path.lastIndex(of: "/")!]) }

    /// False when `[offset, offset + length)` of `fd` is all hole: never written, so a
    /// killed run fetched nothing there and there is nothing to hash.
    static func holdsData(_ fd: Int32, offset: Int64, length: Int) -> Bool {
        let seekData: Int32 = 3  // SEEK_DATA, which Glibc's module does not export (as in FileIO)
        let data = lseek(fd, off_t(offset), seekData)
        if data < 0 { return errno != ENXIO }  // ENXIO: no data after offset; else unknown, hash it
        return Int64(data) < offset + Int64(length)
    }

    static func failure(_ error: ClientError, _ record: FileRecord) -> RestoreFailure {
        switch error {
        case .notFound: return .server("the server no longer holds the content of '\(record.path)' (\(record.hash))")
        case .contentMismatch(let m): return .server("'\(record.path)': \(m)")
        case .localIO(let m): return .local("'\(record.path)': \(m)")
        case .unreachable, .timedOut, .insecure: return .serverGone("'\(record.path)': \(error)")
        default:
            return error.isTransient ? .transient("'\(record.path)': \(error)") : .server("'\(record.path)': \(error)")
        }
    }

    /// Sets access and modification times to `seconds` (the capture date, else the mtime).
    static func setTimes(_ path: String, _ seconds: Int64) {
        var times = [timespec(tv_sec: Int(seconds), tv_nsec: 0), timespec(tv_sec: Int(seconds), tv_nsec: 0)]
        _ = utimensat(AT_FDCWD, path, &times, 0)
    }

    /// The content hash of a file's first `size` bytes, read once in 1 MiB pieces.
    static func contentHash(of path: String, size: Int64) throws -> SHA256Digest {
        let fd = try FileIO.open(path, O_RDONLY)
        defer { FileIO.close(fd) }
        do { return try WorkspaceClient.manifest(fd: fd, size: size).content } catch { throw Errno.ioError }
    }
}

/// The SHA-256 of a range of a descriptor (a block left in a temporary file).
enum RangeHash {
    static func block(fd: Int32, offset: Int64, length: Int) throws -> SHA256Digest {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: length, alignment: 16)
        defer { buffer.deallocate() }
        var filled = 0
        while filled < length {
            let n = try FileIO.pread(fd, into: UnsafeMutableRawBufferPointer(rebasing: buffer[filled..<length]), at: offset + Int64(filled))
            if n == 0 { throw Errno.ioError }
            filled += n
        }
        let hasher = SHA256Hasher()
        hasher.update(UnsafeRawBufferPointer(buffer))
        return hasher.finish()
    }
}
