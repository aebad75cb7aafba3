import Storage
#if canImport(Glibc)
import Glibc
#endif

/// The one-uploader-at-a-time rule across processes: an exclusive `flock` on
/// `<state>/backup.lock`. The mount process and `vdrive task run` may both run; whoever
/// holds the lock uploads, the other waits. The kernel drops the lock when its holder
/// dies (even by SIGKILL), so there is no lease to expire and no clock to trust, and the
/// new holder knows every `uploading` row was left by a process that is gone.
public final class UploadLock: Sendable {
    public let path: String
    private let fd: Int32

    /// Takes the lock without waiting; nil when another process holds it.
    public static func acquire(stateFolder: String) throws -> UploadLock? {
        try FileIO.makeDirectories(stateFolder)
        let path = stateFolder + "/backup.lock"
        let fd = try FileIO.open(path, O_RDWR | O_CREAT, 0o600)
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let err = errno
            FileIO.close(fd)
            if err == EWOULDBLOCK { return nil }
            throw Errno(err)
        }
        // The holder's pid, for people reading the file; the lock itself is the flock.
        let pid = Array("\(getpid())\n".utf8)
        try? FileIO.ftruncate(fd, 0)
        pid.withUnsafeBytes { try? FileIO.pwrite(fd, $0, at: 0) }
        return UploadLock(path: path, fd: fd)
    }

    private init(path: String, fd: Int32) { self.path = path; self.fd = fd }

    deinit {
        flock(fd, LOCK_UN)
        FileIO.close(fd)
    }
}
