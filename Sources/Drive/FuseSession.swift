import Foundation
import CFuse3
import CFuseIO
import Storage

/// Why a mount could not start, with the path at fault and what to do.
public enum MountError: Error, CustomStringConvertible {
    case mountPointMissing(String)
    case mountPointNotDirectory(String)
    case alreadyMounted(String)
    case fuseUnavailable(String)
    /// /dev/fuse exists but this user may not open it (its mode, in octal).
    case fuseDeviceClosed(mode: UInt32)
    case mountFailed(String)

    public var description: String {
        switch self {
        case .mountPointMissing(let p): return "mount point \(p) does not exist; create it (mkdir -p '\(p)') or name another folder"
        case .mountPointNotDirectory(let p): return "mount point \(p) is not a folder; name an empty folder"
        case .alreadyMounted(let p): return "\(p) is already mounted; unmount it first (vdrive unmount '\(p)')"
        case .fuseUnavailable(let m): return "FUSE is not available: \(m); install fuse3 and check that /dev/fuse exists"
        case .fuseDeviceClosed(let mode):
            return "/dev/fuse is not open to this user (mode 0\(String(mode & 0o7777, radix: 8))); a user's mount needs it readable and writable by all, "
                + "as Debian's fuse3 leaves it: ask an administrator to run 'chmod 0666 /dev/fuse' (a udev rule KERNEL==\"fuse\", MODE=\"0666\" keeps it so)"
        case .mountFailed(let p): return "the kernel refused to mount \(p); check that it is an empty folder you may write to and that fuse3 is installed"
        }
    }
}

/// One FUSE session: builds the operation table, mounts, runs the multithreaded loop,
/// unmounts. The loop returns when the file system is unmounted (fusermount3 -u,
/// umount) or the process gets SIGINT, SIGTERM or SIGHUP.
public final class FuseSession {
    private let context: FuseContext
    private let retained: Unmanaged<FuseContext>
    private var session: OpaquePointer?
    public let mountPoint: String
    /// What the mount table shows as the mount's source (`df`'s first column).
    public let source: String

    /// `source`: the drive's state folder, so that a tool given a path on the mount finds
    /// the drive's catalog (/proc/self/mountinfo) whatever `--state` it was mounted with.
    public init(fs: DriveFileSystem, mountPoint: String, source: String = "vdrive") {
        context = FuseContext(fs: fs)
        retained = Unmanaged.passRetained(context)
        self.mountPoint = mountPoint
        self.source = source
    }

    /// A value inside libfuse's `-o` list: a comma would end it, a backslash escapes.
    static func optionValue(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }

    deinit { retained.release() }

    /// True when `path` is the mount point of a mounted file system (per /proc/self/mountinfo).
    public static func isMounted(_ path: String) -> Bool {
        mountDevice((path as NSString).standardizingPath) != nil
    }

    private static func unescapeMountPath(_ s: String) -> String {
        s.replacingOccurrences(of: "\\040", with: " ").replacingOccurrences(of: "\\011", with: "\t")
            .replacingOccurrences(of: "\\012", with: "\n").replacingOccurrences(of: "\\134", with: "\\")
    }

    public static func checkMountPoint(_ path: String) throws {
        var st = stat()
        if stat(path, &st) != 0 {
            if errno == ENOTCONN { throw MountError.alreadyMounted(path) }   // a dead FUSE mount
            throw MountError.mountPointMissing(path)
        }
        if st.st_mode & S_IFMT != S_IFDIR { throw MountError.mountPointNotDirectory(path) }
        if isMounted(path) { throw MountError.alreadyMounted(path) }
        if access("/dev/fuse", R_OK | W_OK) != 0 {
            let why = Errno.current
            var device = stat()
            if why == .permissionDenied, stat("/dev/fuse", &device) == 0 { throw MountError.fuseDeviceClosed(mode: device.st_mode) }
            throw MountError.fuseUnavailable("/dev/fuse: \(why)")
        }
    }

    /// Mounts the file system. After this returns the mount point serves requests
    /// (they queue in the kernel until `run` starts the loop).
    public func mount() throws {
        try Self.checkMountPoint(mountPoint)
        var ops = fuse_lowlevel_ops()
        ops.`init` = { userdata, conn in
            guard let conn, let userdata else { return }
            let ctx = Unmanaged<FuseContext>.fromOpaque(userdata).takeUnretainedValue()
            vd_conn_configure(conn, ctx.maxWrite)
        }
        FuseEntryOps.install(&ops)
        FuseDirectoryOps.install(&ops)
        FuseFileOps.install(&ops)
        FuseXattrOps.install(&ops)

        var options = "fsname=\(Self.optionValue(source)),subtype=vdrive,default_permissions"
        if getuid() == 0 { options += ",allow_other" }
        // VDRIVE_FUSE_DEBUG=1 makes libfuse print every request and reply on stderr
        // (what the kernel asks, in which order: how per-file costs were counted).
        let debug = ProcessInfo.processInfo.environment["VDRIVE_FUSE_DEBUG"] == "1"
        let argv = ["vdrive", "-o", options] + (debug ? ["-d"] : [])
        var cargs = argv.map { strdup($0) }
        defer { cargs.forEach { free($0) } }
        var args = fuse_args(argc: Int32(cargs.count), argv: nil, allocated: 0)
        let se: OpaquePointer? = cargs.withUnsafeMutableBufferPointer { buf in
            args.argv = buf.baseAddress
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, retained.toOpaque())
        }
        fuse_opt_free_args(&args)
        guard let se else { throw MountError.fuseUnavailable("fuse_session_new failed") }
        if fuse_set_signal_handlers(se) != 0 {
            fuse_session_destroy(se)
            throw MountError.fuseUnavailable("cannot install signal handlers")
        }
        if fuse_session_mount(se, mountPoint) != 0 {
            fuse_remove_signal_handlers(se)
            fuse_session_destroy(se)
            throw MountError.mountFailed(mountPoint)
        }
        // The device's I/O through CFuseIO, which takes FUSE_HANDLE_KILLPRIV_V2 from the
        // kernel (Privileges.swift) and FUSE_DIRECT_IO_ALLOW_MMAP (FuseFileOps' open).
        // Should it fail, the kernel clears privileges itself and every file is cached.
        let wrapped = vd_fuse_negotiate(se)
        if wrapped != 0 { DriveLog.info("the FUSE device is read directly (errno \(-wrapped)): the kernel clears setuid itself") }
        session = se
        context.session = se
        Self.widenReadahead(mountPoint)
        let box = SessionBox(se)
        context.fs.kernelCacheIsStale = { ino in
            // Never from inside the request that caused it: the kernel may hold the inode's
            // lock until that request is answered.
            DispatchQueue.global().async { _ = fuse_lowlevel_notify_inval_inode(box.session, fuse_ino_t(ino), 0, 0) }
        }
        context.fs.kernelEntryIsStale = { parent, name in
            DispatchQueue.global().async {
                _ = name.withUnsafeBufferPointer { buffer in
                    buffer.withMemoryRebound(to: CChar.self) { fuse_lowlevel_notify_inval_entry(box.session, fuse_ino_t(parent), $0.baseAddress, buffer.count) }
                }
            }
        }
    }

    /// Readahead asked of the kernel for this mount, in KiB, instead of the 128 KiB every
    /// new device gets. Requests stay at most 1 MiB (`max_write`, which also bounds a
    /// read): 1 MiB of readahead made an eighth of the FUSE round trips for a sequential
    /// reader (local cold reads gained 10-20 %); 4 MiB keeps up to four requests in
    /// flight, so the reader finds the next megabyte answered while it copies this one
    /// (online-only cold reads: a few per cent, about this machine's noise,
    /// Docs/benchmarks.md). A first small read asks for little more: the kernel's first
    /// window is at most four times the read.
    static let readaheadKiB = 4096

    /// Sets the mount's readahead (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`, writable by
    /// root only: a user's mount keeps the kernel's default, which is only slower).
    /// The kernel keeps the smaller of this and the INIT reply's `max_readahead`.
    private static func widenReadahead(_ path: String) {
        guard let device = mountDevice(path) else { return }
        let file = "/sys/class/bdi/\(device)/read_ahead_kb"
        guard access(file, W_OK) == 0 else { return }
        do {
            try "\(readaheadKiB)\n".write(toFile: file, atomically: false, encoding: .utf8)
        } catch {
            DriveLog.info("could not set the mount's readahead (\(file)): \(error); sequential reads use the kernel's default")
        }
    }

    /// `MAJ:MIN` of the file system mounted at `path`, an absolute path without symbolic
    /// links, per /proc/self/mountinfo. No stat and no symlink resolution (as
    /// `standardizingPath` does): called by the mount itself, before its loop runs, a
    /// look at the mount point would wait forever for this very file system's answer.
    static func mountDevice(_ path: String) -> String? {
        guard let info = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        var found: String?
        for line in info.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count > 4, unescapeMountPath(String(fields[4])) == path { found = String(fields[2]) }
        }
        return found   // the last one: the topmost mount at that path
    }

    /// Serves requests until unmounted or signalled, then unmounts and tears down.
    public func run() -> Int32 {
        guard let se = session else { return -1 }
        // As many idle workers kept as there may be workers (16): a worker that ends takes
        // its reply buffer with it, and the kernel's readahead keeps several busy at once.
        let rc = vd_fuse_session_loop_mt(se, 16)
        context.fs.kernelCacheIsStale = nil
        context.fs.kernelEntryIsStale = nil
        fuse_session_unmount(se)
        fuse_remove_signal_handlers(se)
        fuse_session_destroy(se)
        session = nil
        return rc
    }
}

/// The session pointer, handed to the invalidation closure; valid until `run` returns.
private final class SessionBox: @unchecked Sendable {   // immutable pointer; libfuse's notify calls are thread-safe
    let session: OpaquePointer
    init(_ s: OpaquePointer) { session = s }
}
