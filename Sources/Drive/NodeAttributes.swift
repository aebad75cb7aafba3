import Crypto
#if canImport(Glibc)
import Glibc
#endif

/// Nanoseconds since the Unix epoch.
typealias Nanoseconds = Int64

func nowNanoseconds() -> Nanoseconds {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// What the catalog knows about one inode.
public struct NodeAttributes: Sendable, Equatable {
    public var ino: UInt64
    public var mode: UInt32          // full st_mode: type and permission bits
    public var uid: UInt32
    public var gid: UInt32
    public var size: Int64
    public var nlink: UInt32
    var atime: Nanoseconds
    var mtime: Nanoseconds
    var ctime: Nanoseconds
    var rdev: UInt64
    /// The content hash of a regular file (nil: never written, i.e. empty).
    public var content: SHA256Digest?
    /// Bytes held by stored blocks (holes excluded), reported as `st_blocks`; for
    /// folders and symlinks, their size.
    public var stored: Int64 = 0

    public var isDirectory: Bool { mode & S_IFMT == S_IFDIR }
    public var isRegularFile: Bool { mode & S_IFMT == S_IFREG }
    public var isSymlink: Bool { mode & S_IFMT == S_IFLNK }
    public var modificationTime: Int64 { mtime }

    /// The preferred I/O size reported as st_blksize: cp, cat and most tools size their
    /// buffers by it, and one 1 MiB request (max_write) costs one FUSE round trip where
    /// 4 KiB-sized buffers would cost 256.
    static let preferredIOSize = 1 << 20

    func statValue(blockSize: Int = NodeAttributes.preferredIOSize) -> stat {
        var st = stat()
        st.st_ino = UInt(ino)
        st.st_mode = mode
        st.st_nlink = UInt(nlink)
        st.st_uid = uid
        st.st_gid = gid
        st.st_rdev = UInt(rdev)
        st.st_size = Int(size)
        st.st_blksize = blockSize
        st.st_blocks = Int((stored + 511) / 512)
        st.st_atim = Self.timespecValue(atime)
        st.st_mtim = Self.timespecValue(mtime)
        st.st_ctim = Self.timespecValue(ctime)
        return st
    }

    static func timespecValue(_ ns: Nanoseconds) -> timespec {
        var s = ns / 1_000_000_000
        var n = ns % 1_000_000_000
        if n < 0 { n += 1_000_000_000; s -= 1 }
        return timespec(tv_sec: Int(s), tv_nsec: Int(n))
    }

    static func nanoseconds(_ ts: timespec) -> Nanoseconds {
        Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}

/// The attribute changes of one setattr call; nil fields stay as they are.
public struct AttributeChanges: Sendable {
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public var size: Int64?
    public var atime: Int64?
    public var mtime: Int64?
    public init() {}

    var isEmpty: Bool { mode == nil && uid == nil && gid == nil && size == nil && atime == nil && mtime == nil }

    /// Later changes win, field by field.
    mutating func merge(_ later: AttributeChanges) {
        mode = later.mode ?? mode; uid = later.uid ?? uid; gid = later.gid ?? gid
        size = later.size ?? size; atime = later.atime ?? atime; mtime = later.mtime ?? mtime
    }

    /// Applies the ownership, mode and time fields to attributes.
    func apply(to a: inout NodeAttributes) {
        if let mode { a.mode = (a.mode & S_IFMT) | (mode & 0o7777) }
        if let uid { a.uid = uid }
        if let gid { a.gid = gid }
        if let atime { a.atime = atime }
        if let mtime { a.mtime = mtime }
    }
}

/// A directory entry as listed by readdir.
struct DirectoryEntry {
    let offset: Int64          // the offset of the *next* entry
    let name: [UInt8]
    let attributes: NodeAttributes
}
