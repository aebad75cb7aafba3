import Foundation
import Storage

/// The drive's state folder, held with an exclusive lock for as long as a process
/// uses it: two processes must never write one catalog.
public struct StateFolder {
    let path: String
    let lockFD: Int32

    public static func open(_ path: String) throws -> StateFolder {
        do { try FileIO.makeDirectories(path) } catch {
            throw CLIError("cannot create the state folder \(path): \(error); choose another with --state", code: ExitCode.cantCreate)
        }
        if access(path, R_OK | W_OK | X_OK) != 0 {
            throw CLIError("the state folder \(path) is not readable and writable by this user; fix its permissions or choose another with --state", code: ExitCode.noPermission)
        }
        let lockPath = path + "/lock"
        let fd = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd < 0 { throw CLIError("cannot open \(lockPath): \(Errno.current)", code: ExitCode.cantCreate) }
        // Wait briefly: a previous mount may still be finishing its shutdown.
        var waited = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if waited >= 100 {
                let holder = (try? String(contentsOfFile: lockPath, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
                Glibc.close(fd)
                throw CLIError("the state folder \(path) is in use by another vdrive process (pid \(holder)); unmount it first", code: ExitCode.tempFail)
            }
            usleep(100_000)
            waited += 1
        }
        ftruncate(fd, 0)
        let pid = "\(getpid())\n"
        pid.withCString { _ = pwrite(fd, $0, strlen($0), 0) }
        return StateFolder(path: path, lockFD: fd)
    }

    public func release() { Glibc.close(lockFD) }

    /// Whether a process holds the state folder at `path` now (a mount, a task run).
    /// False when the lock file cannot be opened (no such folder, or another user's).
    public static func isHeld(_ path: String) -> Bool {
        let fd = Glibc.open(path + "/lock", O_RDONLY | O_CLOEXEC)
        if fd < 0 { return false }
        defer { Glibc.close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }
}

/// Pid files of running mounts, so `vdrive unmount` can wait for the process to finish.
public enum MountRegistry {
    static func pidFile(for mountPoint: String) -> String {
        let key = mountPoint.utf8.reduce(UInt64(14695981039346656037)) { ($0 ^ UInt64($1)) &* 1099511628211 }
        return Paths.runtimeDir + "/mount-\(String(key, radix: 16)).pid"
    }

    static func record(_ file: String) {
        try? FileManager.default.createDirectory(atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try? "\(getpid())\n".write(toFile: file, atomically: true, encoding: .utf8)
    }

    static func remove(_ file: String) { unlink(file) }

    public static func pid(for mountPoint: String) -> pid_t? {
        guard let text = try? String(contentsOfFile: pidFile(for: mountPoint), encoding: .utf8) else { return nil }
        return pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    public static func waitForExit(_ pid: pid_t, seconds: Int) {
        for _ in 0..<(seconds * 20) {
            if kill(pid, 0) != 0 && errno == ESRCH { return }
            usleep(50_000)
        }
    }
}
