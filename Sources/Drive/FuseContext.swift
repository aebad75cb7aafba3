import CFuse3
import CFuseIO
import Storage

/// What every FUSE callback reaches through `fuse_req_userdata`: the file system and
/// the reply settings. Callbacks capture nothing and hold no globals (a Swift 6
/// closure from main.swift handed to libfuse crashed on its first request).
final class FuseContext: @unchecked Sendable {   // immutable once mounted; DriveFileSystem is thread-safe
    let fs: DriveFileSystem
    let attrTimeout: Double
    let entryTimeout: Double
    let maxWrite: UInt32
    /// The mounted session: set once by `FuseSession.mount`, before the loop serves any
    /// request, and never changed after.
    var session: OpaquePointer?

    init(fs: DriveFileSystem, attrTimeout: Double = 1.0, entryTimeout: Double = 1.0, maxWrite: UInt32 = 1 << 20) {
        self.fs = fs
        self.attrTimeout = attrTimeout
        self.entryTimeout = entryTimeout
        self.maxWrite = maxWrite
    }

    /// True once the kernel agreed that files opened with direct_io can still be mapped
    /// shared (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6 and later; Sources/CFuseIO).
    var directIOKeepsMmap: Bool { session.map { vd_fuse_direct_io_allows_mmap($0) != 0 } ?? false }

    static func of(_ req: fuse_req_t?) -> FuseContext {
        Unmanaged<FuseContext>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }
}

/// The one place where a thrown error becomes an errno (go-fuse's ToErrno).
/// Unknown errors are logged and become EIO.
func errnoValue(for error: any Error) -> Int32 {
    switch error {
    case let e as Errno:
        return e.rawValue
    case let e as Database.GroupLost:
        return errnoValue(for: e.underlying)   // logged where it was lost
    case let e as DatabaseError:
        if e.isDiskFull { return ENOSPC }
        if e.isBusy { return EBUSY }
        DriveLog.error("catalog: \(e)")
        return EIO
    default:
        DriveLog.error("unexpected error: \(error)")
        return EIO
    }
}

/// Runs a handler and sends its error reply when it throws: every request gets
/// exactly one reply, on every path.
@inline(__always)
func replying(_ req: fuse_req_t?, _ body: () throws -> Void) {
    do { try body() } catch { fuse_reply_err(req, errnoValue(for: error)) }
}

func copyName(_ name: UnsafePointer<CChar>?) -> [UInt8] {
    guard let name else { return [] }
    return Array(UnsafeRawBufferPointer(start: name, count: strlen(name)))
}

extension FuseContext {
    func entryParam(_ a: NodeAttributes) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = fuse_ino_t(a.ino)
        e.generation = 1
        e.attr = a.statValue()
        e.attr_timeout = attrTimeout
        e.entry_timeout = entryTimeout
        return e
    }

    func replyEntry(_ req: fuse_req_t?, _ a: NodeAttributes) {
        var e = entryParam(a)
        if fuse_reply_entry(req, &e) != 0 {
            // The kernel did not take the reference (the request was interrupted): undo it.
            fs.forget(a.ino, count: 1)
        }
    }

    func replyAttr(_ req: fuse_req_t?, _ a: NodeAttributes) {
        var st = a.statValue()
        fuse_reply_attr(req, &st, attrTimeout)
    }
}
