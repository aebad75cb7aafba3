import Foundation
import Synchronization

/// Commands with a deadline, for benchmark rows that can stall (a FUSE request that
/// never gets its reply): each command runs in its own process group, and a command
/// past its deadline has its whole group killed, so the run prints "timeout after N s"
/// and goes on instead of hanging.
enum TimedCommand {
    enum Outcome {
        case finished(status: Int32, seconds: Double)
        case timedOut(after: Double)

        var succeeded: Bool { if case .finished(0, _) = self { return true } else { return false } }
        var seconds: Double? { if case .finished(_, let s) = self { return s } else { return nil } }

        /// "2.31" for a success, "failed (exit 2) after 2.31 s", "timeout after 120 s".
        func text(_ format: (Double) -> String) -> String {
            switch self {
            case .finished(0, let s): return format(s)
            case .finished(let status, let s): return "failed (\(TimedCommand.describe(status))) after \(Bench.f(s)) s"
            case .timedOut(let after): return "timeout after \(Int(after)) s"
            }
        }
    }

    /// Waits for one child on its own thread, so the wait can end at a deadline.
    /// @unchecked Sendable: `status` and `end` are written once by the waiting thread
    /// before it signals `done`, and read only after `done` was received.
    private final class Waiter: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        var status: Int32 = 0
        var end = 0.0
    }

    /// Runs `/bin/sh -c command` with stdin from /dev/null and stdout + stderr appended to
    /// `log` (or discarded), in a new process group. Past `timeout` seconds the group is
    /// killed (SIGKILL) and reaped.
    static func run(_ command: String, timeout: Double, log: String? = nil) -> Outcome {
        let start = Bench.now()
        let pid: pid_t
        do { pid = try spawn(["/bin/sh", "-c", command], output: log ?? "/dev/null") } catch {
            return .finished(status: 127 << 8, seconds: 0)
        }
        let waiter = Waiter()
        Thread.detachNewThread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            waiter.status = status
            waiter.end = Bench.now()
            waiter.done.signal()
        }
        if waiter.done.wait(timeout: .now() + timeout) == .success {
            return .finished(status: waiter.status, seconds: waiter.end - start)
        }
        // Kill every descendant too: a program may move itself into a process group of
        // its own (fsstress does), which a kill of our group does not reach. List them
        // before killing anyone, while the parent links are still there.
        let tree = descendants(of: pid)
        kill(-pid, SIGKILL)
        for p in tree { kill(-p, SIGKILL); kill(p, SIGKILL) }
        // A process waiting on a FUSE request dies at SIGKILL (the wait is killable); give
        // it a moment, then leave the waiting thread behind rather than hang the run.
        _ = waiter.done.wait(timeout: .now() + 10)
        return .timedOut(after: timeout)
    }

    /// Every process below `pid` (children, their children, ...), from /proc.
    static func descendants(of pid: pid_t) -> [pid_t] {
        var children: [pid_t: [pid_t]] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let p = pid_t(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After the command: state, ppid, ...
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let ppid = pid_t(fields[1]) { children[ppid, default: []].append(p) }
        }
        var out: [pid_t] = [], queue = [pid]
        while let p = queue.popLast() {
            for c in children[p] ?? [] { out.append(c); queue.append(c) }
        }
        return out
    }

    /// Like `run`, returning what the command printed on stdout (stderr discarded).
    static func output(_ command: String, timeout: Double) -> (Outcome, String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("vdrive-bench-\(getpid())-\(UUID().uuidString.prefix(8)).out").path
        defer { unlink(file) }
        let outcome = run(command + " 2>/dev/null", timeout: timeout, log: file)
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return (outcome, text)
    }

    /// Starts a long-running program (a FUSE daemon in the foreground) in its own process
    /// group, output appended to `log`. Returns its pid.
    static func spawn(_ argv: [String], output: String) throws -> pid_t {
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        posix_spawnattr_setpgroup(&attr, 0)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETPGROUP))
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for p in cArgs { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, &attr, cArgs, environ)
        if rc != 0 { throw Bench.Failure(description: "cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// Runs a short program to its end, output discarded, failing when it fails. No
    /// shell and no polling: for timing a program whose own run is milliseconds
    /// (Foundation's `Process` adds tens of milliseconds to the wait, measured).
    static func runDirect(_ argv: [String]) throws {
        let pid = try spawn(argv, output: "/dev/null")
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        guard status == 0 else { throw Bench.Failure(description: "\(argv.joined(separator: " ")): \(describe(status))") }
    }

    /// Waits up to `timeout` seconds for a child started by `spawn` to exit. True if it did.
    static func reap(_ pid: pid_t, timeout: Double) -> Bool {
        let deadline = Bench.now() + timeout
        var status: Int32 = 0
        repeat {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid || (r < 0 && errno == ECHILD) { return true }
            usleep(20_000)
        } while Bench.now() < deadline
        return false
    }

    /// "exit 2" or "signal 9" for a wait status.
    static func describe(_ status: Int32) -> String {
        status & 0x7f == 0 ? "exit \((status >> 8) & 0xff)" : "signal \(status & 0x7f)"
    }
}

/// FUSE mounts a benchmark made, unmounted on every path: at the end, on an error, and
/// on SIGINT/SIGTERM (handled on a dispatch queue while the run waits on children).
final class BenchMounts: Sendable {
    struct Mount: Sendable {
        let path: String
        let pid: pid_t
    }

    static let shared = BenchMounts()
    private let mounts = Mutex<[Mount]>([])
    /// Kept alive for the run; set up once, from the main thread, before any row runs.
    nonisolated(unsafe) private static var signalSources: [DispatchSourceSignal] = []

    func add(_ m: Mount) { mounts.withLock { $0.append(m) } }

    /// Unmounts every registered mount and stops its daemon (SIGTERM, then SIGKILL).
    func unmountAll() {
        let all = mounts.withLock { m -> [Mount] in defer { m.removeAll() }; return m }
        for m in all.reversed() { Self.unmount(m) }
    }

    func unmount(path: String) {
        let m = mounts.withLock { list -> Mount? in
            guard let i = list.firstIndex(where: { $0.path == path }) else { return nil }
            return list.remove(at: i)
        }
        if let m { Self.unmount(m) }
    }

    static func unmount(_ m: Mount) {
        if Bench.isMounted(m.path) {
            if !TimedCommand.run("fusermount3 -u '\(m.path)'", timeout: 60).succeeded {
                _ = TimedCommand.run("fusermount3 -u -z '\(m.path)'", timeout: 30)
            }
        }
        if !TimedCommand.reap(m.pid, timeout: 60) {
            kill(m.pid, SIGTERM)
            if !TimedCommand.reap(m.pid, timeout: 10) {
                kill(m.pid, SIGKILL)
                _ = TimedCommand.reap(m.pid, timeout: 10)
            }
        }
        if Bench.isMounted(m.path) { _ = TimedCommand.run("fusermount3 -u -z '\(m.path)'", timeout: 30) }
    }

    /// On SIGINT or SIGTERM: unmount everything, then exit 130.
    func unmountOnSignals() {
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { [self] in
                FileHandle.standardError.write(Data("\nvdrive-bench: interrupted, unmounting ...\n".utf8))
                unmountAll()
                exit(130)
            }
            source.resume()
            Self.signalSources.append(source)
        }
    }
}

/// Prints a line and flushes at once, so progress shows in a log file while a long
/// benchmark runs (stdout to a file is block-buffered).
func say(_ line: String = "") {
    print(line)
    fflush(nil)
}
