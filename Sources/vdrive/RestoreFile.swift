import Client
import Crypto
import Protocol
import Storage
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

/// Restores one file of a device's backup to `DEST/<its path>`.
///
/// Kill safety and resume: bytes go to a hidden temporary file next to the final
/// name, `.<name>.<content hash prefix>.vdrive-restore`, which is renamed into place
/// only when every block of it has been verified, so a file under its final name is
/// always complete. Named by content, a temporary file only ever holds blocks of that
/// content at their places: a rerun hashes the blocks already there and fetches only
/// the others. A final file whose size and content hash match is not fetched again.
///
/// Verification: the manifest (`contentBlocks`) is checked to hash to the content
/// hash, and each block fetched whole (`downloadBlock`) is checked against its block
/// hash; zero blocks are holes, never fetched. Together that proves the temporary
/// file holds exactly the content before it is renamed.
struct FileRestorer {
    enum Outcome: Equatable {
        /// Already at DEST with the right bytes; nothing was fetched.
        case alreadyThere
        /// Fetched `downloaded` bytes (less than the size when a kill left blocks behind).
        case restored(downloaded: Int64)
    }

    let client: WorkspaceClient
    let destination: String
    /// Gets the bytes of the current file fetched so far; returns false to cancel.
    var progress: (Int64) -> Bool = { _ in true }

    /// The final path of a record under DEST. Paths come from the server, which checks
    /// them, but are checked again here: a `..` must never write outside DEST.
    func finalPath(_ record: FileRecord) throws(RestoreFailure) -> String {
        do { return destination + "/" + (try Validation.path(record.path)) } catch {
            throw .server("the server listed a path that cannot be restored safely ('\(record.path)'): \(error.message)")
        }
    }

    func restore(_ record: FileRecord) throws(RestoreFailure) -> Outcome {
        let final = try finalPath(record)
        guard let content = SHA256Digest(hex: record.hash) else { throw .server("'\(record.path)' has no valid content hash ('\(record.hash)')") }
        let date = RestoreSelection.date(of: record)
        if let st = try? FileIO.status(final) {
            guard (st.st_mode & S_IFMT) == S_IFREG, Int64(st.st_size) == record.size, (try? Self.contentHash(of: final, size: record.size)) == content else {
                throw .local("\(final) exists and is not this backup; move it away (or restore into another folder) and run again")
            }
            Self.setTimes(final, date)
            return .alreadyThere
        }
        let folder = String(final[..<final.lastIndex(of: "/")!])
        let name = String(final[final.index(after: final.lastIndex(of: "/")!)...])
        do { try FileIO.makeDirectories(folder, mode: 0o755) } catch { throw .local("cannot create the folder \(folder): \(error)") }
        let temporary = folder + "/." + name + "." + content.hex.prefix(16) + ".vdrive-restore"

        let manifest: BlockManifest
        do { manifest = try client.contentBlocks(content) } catch { throw Self.failure(error, record) }
        guard manifest.size == record.size else { throw .server("the server's content of '\(record.path)' is \(manifest.size) bytes, its record says \(record.size)") }

        let fd: Int32
        do { fd = try FileIO.open(temporary, O_RDWR | O_CREAT, 0o644) } catch { throw .local("cannot write \(temporary): \(error)") }
        var closed = false
        defer { if !closed { FileIO.close(fd) } }
        var downloaded: Int64 = 0
        do {
            let had = Int64(try FileIO.status(fd).st_size)
            // Exactly the size: holes read as zeros, which is what zero blocks are.
            try FileIO.ftruncate(fd, record.size)
            for (index, block) in manifest.blocks.enumerated() {
                let length = Blocks.length(ofBlock: index, fileSize: record.size)
                let offset = Int64(index) * Int64(Blocks.size)
                if Blocks.isZero(block, length: length) { continue }
                // Left by a killed run: keep the block if its bytes hash to it.
                if offset + Int64(length) <= had, (try? RangeHash.block(fd: fd, offset: offset, length: length)) == block { continue }
                let base = downloaded
                do {
                    downloaded += try client.downloadBlock(block, to: fd, at: offset, progress: { progress(base + $0) })
                } catch {
                    throw Self.failure(error, record)
                }
            }
            try FileIO.fdatasync(fd)
        } catch let failure as RestoreFailure {
            throw failure
        } catch {
            throw .local("cannot write \(temporary): \(error)")
        }
        FileIO.close(fd)
        closed = true
        Self.setTimes(temporary, date)
        do { try FileIO.rename(temporary, final) } catch { throw .local("cannot rename \(temporary) to \(final): \(error)") }
        return .restored(downloaded: downloaded)
    }

    static func failure(_ error: ClientError, _ record: FileRecord) -> RestoreFailure {
        switch error {
        case .notFound: return .server("the server no longer holds the content of '\(record.path)' (\(record.hash))")
        case .contentMismatch(let m): return .server("'\(record.path)': \(m)")
        case .localIO(let m): return .local("'\(record.path)': \(m)")
        case .unreachable, .timedOut: return .serverGone("'\(record.path)': \(error)")
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
