import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// Thin, throwing wrappers over the file system calls Storage and Drive make.
/// `EINTR` is retried here, in one place, and never around `close`.
public enum FileIO {
    @inline(__always)
    static func retrying(_ body: () -> Int) -> Int {
        while true {
            let r = body()
            if r == -1 && errno == EINTR { continue }
            return r
        }
    }

    public static func open(_ path: String, _ flags: Int32, _ mode: mode_t = 0o644) throws -> Int32 {
        let fd = Int32(retrying { Int(Glibc.open(path, flags | O_CLOEXEC, mode)) })
        if fd < 0 { throw Errno.current }
        return fd
    }

    public static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Reads up to `count` bytes at `offset`; short only at end of file.
    public static func pread(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n = retrying { Glibc.pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done)) }
            if n < 0 { throw Errno.current }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Writes all of `buffer` at `offset`.
    public static func pwrite(_ fd: Int32, _ buffer: UnsafeRawBufferPointer, at offset: Int64) throws {
        var done = 0
        while done < buffer.count {
            let n = retrying { Glibc.pwrite(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done)) }
            if n < 0 { throw Errno.current }
            done += n
        }
    }

    public static func fsync(_ fd: Int32) throws {
        if retrying({ Int(Glibc.fsync(fd)) }) != 0 { throw Errno.current }
    }

    public static func fdatasync(_ fd: Int32) throws {
        if retrying({ Int(Glibc.fdatasync(fd)) }) != 0 { throw Errno.current }
    }

    public static func ftruncate(_ fd: Int32, _ size: Int64) throws {
        if retrying({ Int(Glibc.ftruncate(fd, off_t(size))) }) != 0 { throw Errno.current }
    }

    public static func status(_ fd: Int32) throws -> Glibc.stat {
        var st = Glibc.stat()
        if Glibc.fstat(fd, &st) != 0 { throw Errno.current }
        return st
    }

    public static func status(_ path: String) throws -> Glibc.stat {
        var st = Glibc.stat()
        if statPath(path, &st) != 0 { throw Errno.current }
        return st
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    public static func rename(_ from: String, _ to: String) throws {
        if Glibc.rename(from, to) != 0 { throw Errno.current }
    }

    public static func unlink(_ path: String) throws {
        if Glibc.unlink(path) != 0 { throw Errno.current }
    }

    /// Creates a folder and its parents; an existing folder is fine.
    public static func makeDirectories(_ path: String, mode: mode_t = 0o700) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, mode) != 0 && errno != EEXIST { throw Errno.current }
        }
        var st = Glibc.stat()
        guard statPath(path, &st) == 0 else { throw Errno.current }
        guard (st.st_mode & S_IFMT) == S_IFDIR else { throw Errno.notDirectory }
    }

    /// fsyncs a folder, so that a rename or create in it is durable.
    public static func syncDirectory(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try fsync(fd)
    }

    /// Writes back every dirty file of the file system that holds `path` (syncfs(2)):
    /// one journal commit for thousands of new files, where an fdatasync each would
    /// cost one commit per file.
    public static func syncFileSystem(_ path: String) throws {
        let fd = try open(path, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        if vd_syncfs(fd) != 0 { throw Errno.current }
    }

    /// Starts writing `[offset, offset + length)` of `fd` back to the disk and returns
    /// at once (sync_file_range WRITE): a later fdatasync finds less to wait for. Only a
    /// hint: nothing is promised about durability, so failures are not reported.
    /// What O_DIRECT writes align their offsets, lengths and buffers to: the page size,
    /// which covers every Linux disk's logical block.
    public static let directAlignment = 4096

    /// A second descriptor of an existing file for writes that bypass the page cache
    /// (O_DIRECT: aligned offsets, lengths and buffers; HTTPClient's DirectSink), or nil
    /// when its file system refuses them (tmpfs) or is not a local disk's.
    public static func openDirectForWriting(_ path: String) -> Int32? {
        let fd = vd_open_direct_for_writing(path)
        guard fd >= 0 else { return nil }
        guard directWriteFileSystems.contains(fileSystemType(fd)) else {
            close(fd)
            return nil
        }
        return fd
    }

    /// The magic number of the file system holding `fd` (`statfs.f_type`), or -1.
    public static func fileSystemType(_ fd: Int32) -> Int { vd_file_system_type(fd) }

    /// File systems on a local disk, where a direct write goes to the disk and costs
    /// no page cache: ext2/3/4, XFS, btrfs. Elsewhere (NFS, FUSE, overlays) a direct
    /// write can be a synchronous round trip each, so the page cache is kept.
    public static let directWriteFileSystems: Set<Int> = [0xEF53, 0x5846_5342, 0x9123_683E]

    /// Frees the disk blocks under `length` bytes at `offset`; the range then reads as
    /// zeros and the file keeps its size. Only whole 4 KiB blocks inside the range are freed.
    public static func punchHole(_ fd: Int32, at offset: Int64, length: Int64) throws {
        if vd_punch_hole(fd, offset, length) != 0 { throw Errno.current }
    }

    public static func startWriteback(_ fd: Int32, offset: Int64, length: Int64) {
        _ = vd_start_writeback(fd, offset, length)
    }

    /// Copies `length` bytes between descriptors in the kernel (copy_file_range),
    /// falling back to read/write where the file systems do not support it.
    public static func copy(from source: Int32, to destination: Int32, length: Int64) throws {
        try copyRange(from: source, to: destination, at: 0, length: length)
    }

    /// lseek(2) whence values for sparse files (Linux), not exported by Swift's Glibc.
    static let seekData: Int32 = 3
    static let seekHole: Int32 = 4

    /// Copies the first `length` bytes of `source` to the same offsets of `destination`,
    /// leaving holes as holes: only the data extents are copied (SEEK_DATA/SEEK_HOLE),
    /// so a sparse 4 MiB block with one written page stays one page on disk. The caller
    /// sets the destination's length.
    public static func copyPreservingHoles(from source: Int32, to destination: Int32, length: Int64) throws {
        var position: Int64 = 0
        while position < length {
            let data = Int64(lseek(source, off_t(position), seekData))
            if data < 0 {
                if errno == ENXIO { return }            // only a hole is left
                try copyRange(from: source, to: destination, at: position, length: length - position)
                return
            }
            if data >= length { return }
            var end = Int64(lseek(source, off_t(data), seekHole))
            if end < 0 || end > length { end = length }
            try copyRange(from: source, to: destination, at: data, length: end - data)
            position = end
        }
    }

    private static func copyRange(from source: Int32, to destination: Int32, at start: Int64, length: Int64) throws {
        var inOffset: Int64 = start
        var outOffset: Int64 = start
        var remaining = length
        while remaining > 0 {
            let n = retrying { vd_copy_file_range(source, &inOffset, destination, &outOffset, Int(min(remaining, 1 << 30))) }
            if n < 0 {
                if errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP {
                    try copyByReading(from: source, to: destination, from: Int64(inOffset), length: remaining)
                    return
                }
                throw Errno.current
            }
            if n == 0 { break }
            remaining -= Int64(n)
        }
    }

    private static func copyByReading(from source: Int32, to destination: Int32, from start: Int64, length: Int64) throws {
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        var offset = start
        let end = start + length
        while offset < end {
            let want = Int(min(Int64(chunk), end - offset))
            let n = try pread(source, into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
            if n == 0 { break }
            try pwrite(destination, UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: offset)
            offset += Int64(n)
        }
    }

    /// Lists a folder's names, without "." and "..".
    public static func listDirectory(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw Errno.current }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}

/// `stat(2)` at file scope: inside `FileIO` the name would resolve to the method.
private func statPath(_ path: String, _ st: inout stat) -> Int32 { stat(path, &st) }
