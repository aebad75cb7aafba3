import Foundation
import Crypto

/// What the model runs against: devices with real mounts of one workspace, and its
/// server. The test target implements it with its mounts and local servers, the
/// benchmark with its own processes.
public protocol MirrorModelWorld: AnyObject {
    var deviceCount: Int { get }
    func mountPoint(_ device: Int) -> String
    /// A clean unmount, and a mount in the background.
    func unmount(_ device: Int) throws
    func mount(_ device: Int) throws
    /// A mount in the foreground, as a child process, and its SIGKILL (the mount point
    /// freed after it).
    func mountForeground(_ device: Int) throws
    func kill9(_ device: Int)
    func stopServer()
    func startServer() throws
    /// Every name under a mount outside the Camera Roll and the generated trees: path →
    /// "folder", "file <sha256> <size> x<executable>" or "symlink <target>".
    func snapshot(_ device: Int) throws -> [String: String]
    /// Waits until every device shows the same tree (throws, after printing the trees
    /// and the mounts' logs, when `seconds` pass).
    func waitForSameTree(within seconds: Double) throws
    /// The content hash of every version the server keeps: of live nodes and of nodes in
    /// its trash (`tree_versions`).
    func serverVersionHashes() -> Set<String>
    func printLogs()
}

extension MirrorModelWorld {
    public func snapshot(_ device: Int) throws -> [String: String] { try workspaceSnapshot(mountPoint(device)) }

    public func waitForSameTree(within seconds: Double) throws {
        var last: [[String: String]] = []
        do {
            try eventually("the same workspace on every device", within: seconds, poll: 0.2) {
                last = try (0..<deviceCount).map { try snapshot($0) }
                return last.dropFirst().allSatisfy { $0 == last[0] }
            }
        } catch {
            for (d, tree) in last.enumerated() { print("d\(d): \(tree.sorted { $0.key < $1.key })") }
            printLogs()
            throw error
        }
    }
}

/// What a finished run found and how long it took.
public struct MirrorModelReport: Sendable {
    public var seed: UInt64
    public var operations = 0
    public var failedOperations = 0
    public var steps = 0
    public var disruptions = 0
    /// Versions the rule requires, and how many of them are kept (all, when it passed).
    public var requiredVersions = 0
    public var keptVersions = 0
    public var conflictCopies = 0
    public var finalNodes = 0
    /// Seconds: the schedule, the wait for the same tree, the whole run.
    public var scheduleSeconds = 0.0
    public var convergenceSeconds = 0.0
    public var totalSeconds = 0.0
    /// What is wrong (empty when it passed).
    public var problems: [String] = []

    public var summary: String {
        String(format: "seed %llu: %d operations (%d refused by the file system), %d disruptions, %d versions required and %d kept, %d conflict copies, %d nodes at the end; schedule %.1f s, convergence %.1f s, total %.1f s",
               seed, operations, failedOperations, disruptions, requiredVersions, keptVersions, conflictCopies, finalNodes,
               scheduleSeconds, convergenceSeconds, totalSeconds)
    }
}

/// The model-based test of the synced workspace, part two: the schedule carried out on
/// real mounts, every step recorded, and the end checked.
///
/// At the end every device is mounted and the server up, and the run checks:
///
/// 1. **One tree.** Every device shows the same names, kinds, sizes, contents (SHA-256),
///    executable bits and symlink targets, within `convergence` seconds, and nothing
///    waits to go up or come down (the status file's workspace line).
/// 2. **No content from nowhere.** Every file's content at the end is one a device wrote.
/// 3. **No version lost.** A *required version* is a content a device closed (a create,
///    write, append or truncate that succeeded) on a file (an inode, as `fstat` names
///    it) that the same device then left alone for `quietStretch` seconds (no other
///    content closed on that inode, no unlink of it, no rename over it, no `rm -r` of its
///    folder) while the device stayed mounted and the server stayed up the whole time,
///    and had been up for `reconnect` seconds when it was closed (a device that found
///    the server unreachable asks again at most 5 s apart).
///    Why these: the mirror sends the latest *settled* state of a node (0.2 s of quiet,
///    Docs/sync.md "Up"), so a content its own device replaced or deleted sooner was
///    never meant to be sent; a content closed while the server was down, or just before
///    an unmount or a kill, may be replaced at the next mount, or lost in a kill's
///    group-commit window, before it goes up. Other devices cannot take that content
///    away first: a remote change is not applied to an inode with a change waiting to go
///    up (it is settled by the conflict rules once ours is sent). A content that stayed
///    quiet on a mounted device with a reachable server was sent; from then on the server
///    keeps it while its node is live or in the trash, whatever other devices do: an
///    edit elsewhere makes a conflict copy or a newer version of the same node, a delete
///    puts the node in the trash, and versions stay. So each required version's content
///    hash must be a version the server keeps (`tree_versions`: live nodes, conflict
///    copies, the trash) or a file of the final tree. The empty content is not required
///    (no bytes to lose), and the run fails if the rule required fewer versions than one
///    per 20 operations (the check must not be vacuous).
public final class MirrorModelRun {
    let options: MirrorModelOptions
    let world: MirrorModelWorld
    let steps: [MirrorModelStep]
    /// Every step as carried out: time since the start, the step, what happened.
    public private(set) var trace: [String] = []

    private struct Version {
        var step: Int
        var device: Int
        var path: String
        var ino: UInt64
        var contentHash: String
        var size: Int
        var closedAt: Double
        /// Closed while the server was down.
        var disturbed: Bool
    }

    /// Contents written so far: SHA-256 → content hash (the server's name for it).
    private var known: [String: String] = [:]
    private var unknownContent = false
    /// Closed contents whose quiet stretch is not decided yet, by device and inode.
    private var pending: [Int: [UInt64: Version]] = [:]
    private var required: [Version] = []
    private var mounted: [Bool]
    private var foreground: [Bool]
    private var serverUp = true
    /// When the server last started (the run's clock).
    private var serverStarted = -Double.infinity
    private var start = 0.0

    public init(_ options: MirrorModelOptions, world: MirrorModelWorld) {
        self.options = options
        self.world = world
        steps = MirrorModelSchedule.make(options)
        mounted = Array(repeating: true, count: world.deviceCount)
        foreground = Array(repeating: false, count: world.deviceCount)
    }

    /// The line that replays this run.
    public var replay: String { "VDRIVE_MIRROR_SEED=\(options.seed) VDRIVE_MIRROR_OPS=\(options.operations)" }

    private func now() -> Double { Date().timeIntervalSince1970 - start }

    private func note(_ text: String) { trace.append(String(format: "%8.3f ", now()) + text) }

    public func printTrace() {
        print("--- the model's trace (\(replay)):")
        for line in trace { print(line) }
    }

    /// Carries the schedule out and checks the end. Problems are in the report; a step
    /// the harness could not carry out (a mount that fails) throws.
    public func run() throws -> MirrorModelReport {
        var report = MirrorModelReport(seed: options.seed)
        start = Date().timeIntervalSince1970
        print("mirror model: \(replay), \(world.deviceCount) devices, \(steps.count) steps")
        let empty = ContentHash.of(bytes: []).hex
        known[SHA256Hasher.digest([UInt8]()).hex] = empty
        do {
            for (index, step) in steps.enumerated() {
                try carryOut(index, step, &report)
            }
            // Everyone back: mounted, the server up.
            if !serverUp { try carryOut(steps.count, .serverUp, &report) }
            for d in 0..<world.deviceCount where !mounted[d] { try carryOut(steps.count, .back(d), &report) }
        } catch {
            note("stopped: \(error)")
            throw error
        }
        report.scheduleSeconds = now()
        report.steps = steps.count

        let converging = now()
        do {
            try world.waitForSameTree(within: options.convergence)
            try eventually("every device idle (nothing to send or apply)", within: 60, poll: 0.2) {
                (0..<world.deviceCount).allSatisfy { !workspaceLine($0).contains(" to send") && !workspaceLine($0).contains(" to apply") }
            }
        } catch {
            report.problems.append("\(error)")
        }
        report.convergenceSeconds = now() - converging
        for d in 0..<world.deviceCount { note("d\(d) status: \(workspaceLine(d))") }

        // Versions still open are decided now: every device idle, mounted, server up.
        for d in pending.keys.sorted() { end(d, pending[d].map { Array($0.keys) } ?? []) }
        let tree = (try? world.snapshot(0)) ?? [:]
        report.finalNodes = tree.count
        report.conflictCopies = tree.keys.filter { $0.contains(" (conflict from ") }.count
        var finalContents = Set<String>()
        for (path, entry) in tree.sorted(by: { $0.key < $1.key }) {
            let parts = entry.split(separator: " ")
            guard parts.first == "file", parts.count >= 2 else { continue }
            if let hash = known[String(parts[1])] {
                finalContents.insert(hash)
            } else if !unknownContent {
                report.problems.append("\(path) holds a content no device wrote (\(entry))")
            }
        }
        let kept = world.serverVersionHashes().union(finalContents)
        report.requiredVersions = required.count
        for v in required {
            if kept.contains(v.contentHash) { report.keptVersions += 1; continue }
            report.problems.append(String(format: "lost: the content d%d closed at %@ at %.3f s (step %d, %d B, content hash %@) is neither on any device nor among the server's versions",
                                          v.device, v.path, v.closedAt, v.step, v.size, v.contentHash))
        }
        if required.count < max(1, options.operations / 20) {
            report.problems.append("the rule required only \(required.count) versions for \(options.operations) operations: the check proves too little")
        }
        report.totalSeconds = now()
        note(report.summary)
        return report
    }

    private func workspaceLine(_ d: Int) -> String {
        let text = (try? String(contentsOfFile: world.mountPoint(d) + "/.backup/status", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").first { $0.hasPrefix("Workspace:") }.map(String.init) ?? "(no workspace line)"
    }

    // MARK: The version rule

    /// The quiet stretch of these versions of device `d` ends now (the device changed or
    /// removed their inodes, or was disturbed): each is required if it lasted long enough.
    private func end(_ d: Int, _ inodes: [UInt64]) {
        let t = now()
        for ino in inodes {
            guard let v = pending[d]?.removeValue(forKey: ino) else { continue }
            if !v.disturbed && t - v.closedAt >= options.quietStretch && v.size > 0 { required.append(v) }
        }
    }

    /// Versions whose stretch has already lasted long enough are decided (they are required).
    private func sweep() {
        let t = now()
        for d in pending.keys.sorted() {
            let due = pending[d]!.values.filter { t - $0.closedAt >= options.quietStretch }.map(\.ino)
            end(d, due)
        }
    }

    private func disturb(_ devices: [Int]) {
        for d in devices { end(d, pending[d].map { Array($0.keys) } ?? []) }
    }

    // MARK: Carrying out

    private func carryOut(_ index: Int, _ step: MirrorModelStep, _ report: inout MirrorModelReport) throws {
        switch step {
        case .op(let d, let op, let pause):
            sweep()
            let outcome = perform(index, d, op)
            report.operations += 1
            if !outcome.ok { report.failedOperations += 1 }
            end(d, outcome.removed)
            if let c = outcome.content {
                end(d, [c.ino])
                known[c.sha256] = c.contentHash
                pending[d, default: [:]][c.ino] = Version(step: index, device: d, path: op.path, ino: c.ino, contentHash: c.contentHash,
                                                          size: c.size, closedAt: now(),
                                                          disturbed: !serverUp || now() - serverStarted < options.reconnect || !mounted[d])
                note("#\(index) d\(d) \(op): ok, ino \(c.ino), \(c.size) B, content \(c.contentHash.prefix(12))")
            } else {
                note("#\(index) d\(d) \(op): \(outcome.text)" + (outcome.removed.isEmpty ? "" : ", removed ino \(outcome.removed)"))
            }
            if pause > 0 { usleep(UInt32(pause * 1e6)) }
        case .rest(let seconds):
            sweep()
            note("#\(index) \(step)")
            usleep(UInt32(seconds * 1e6))
        case .away(let d):
            disturb([d])
            note("#\(index) \(step)")
            try world.unmount(d)
            mounted[d] = false
            report.disruptions += 1
        case .back(let d):
            note("#\(index) \(step)")
            try world.mount(d)
            mounted[d] = true
        case .serverDown:
            disturb(Array(0..<world.deviceCount))
            note("#\(index) \(step)")
            world.stopServer()
            serverUp = false
            report.disruptions += 1
        case .serverUp:
            note("#\(index) \(step)")
            try world.startServer()
            serverUp = true
            serverStarted = now()
        case .foreground(let d):
            disturb([d])
            note("#\(index) \(step)")
            try world.unmount(d)
            try world.mountForeground(d)
            foreground[d] = true
        case .kill(let d):
            disturb([d])
            note("#\(index) \(step)")
            world.kill9(d)
            try world.mount(d)
            foreground[d] = false
            report.disruptions += 1
        }
    }

    private struct Closed {
        var sha256: String
        var contentHash: String
        var size: Int
        var ino: UInt64
    }

    private struct Outcome {
        var text: String
        var content: Closed? = nil
        /// Inodes of files this operation removed (unlinked, renamed over, `rm -r`).
        var removed: [UInt64] = []
        var ok: Bool { text.hasPrefix("ok") }
    }

    /// The bytes of a new content: who wrote it and when, then pseudo-random bytes.
    private func content(_ index: Int, _ device: Int, _ length: Int) -> [UInt8] {
        let header = Array("seed \(options.seed) step \(index) d\(device)\n".utf8)
        if length <= header.count { return Array(header.prefix(length)) }
        return header + randomBytes(length - header.count, seed: options.seed &* 1_000_003 &+ UInt64(index))
    }

    private func closed(_ bytes: [UInt8], _ ino: UInt64) -> Closed {
        Closed(sha256: SHA256Hasher.digest(bytes).hex, contentHash: ContentHash.of(bytes: bytes).hex, size: bytes.count, ino: ino)
    }

    /// The inode of a file or symlink at `path` (not a folder), nil when there is none.
    private func fileInode(_ path: String) -> UInt64? {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT != S_IFDIR else { return nil }
        return UInt64(st.st_ino)
    }

    private func inode(_ fd: Int32) -> UInt64 {
        var st = stat()
        return fstat(fd, &st) == 0 ? UInt64(st.st_ino) : 0
    }

    private func failure(_ what: String) -> Outcome { Outcome(text: "\(what): \(String(cString: strerror(errno)))") }

    private func perform(_ index: Int, _ d: Int, _ op: MirrorModelOp) -> Outcome {
        let root = world.mountPoint(d) + "/"
        switch op {
        case .create(let p, let n), .write(let p, let n):
            let create: Bool
            if case .create = op { create = true } else { create = false }
            // Never through a symlink: its target may be outside the mount (`../b.txt` at the root).
            let fd = open(root + p, (create ? O_WRONLY | O_CREAT | O_EXCL : O_WRONLY | O_CREAT | O_TRUNC) | O_NOFOLLOW, 0o644)
            if fd < 0 { return failure("open") }
            let bytes = content(index, d, n)
            let written = writeAll(fd, bytes)
            let ino = inode(fd)
            if close(fd) != 0 || !written { unknownContent = true; return failure("write or close (content unknown)") }
            return Outcome(text: "ok", content: closed(bytes, ino))
        case .append(let p, let n), .truncate(let p, let n):
            let fd = open(root + p, O_RDWR | O_NOFOLLOW | (isAppend(op) ? O_APPEND : 0))
            if fd < 0 { return failure("open") }
            let changed = isAppend(op) ? writeAll(fd, content(index, d, n)) : ftruncate(fd, off_t(min(n, fileSize(fd)))) == 0
            if !changed { close(fd); unknownContent = true; return failure("append or truncate (content unknown)") }
            // What is closed, read through the same handle: a remote change is never
            // applied under a writer, so this is the content the close commits.
            let bytes = readAll(fd)
            let ino = inode(fd)
            if close(fd) != 0 || bytes == nil { unknownContent = true; return failure("read back or close (content unknown)") }
            return Outcome(text: "ok", content: closed(bytes!, ino))
        case .rename(let a, let b):
            // A file renamed over another removes that one (a rename of a file onto itself, nothing).
            let replaced = fileInode(root + b).flatMap { $0 == fileInode(root + a) ? nil : $0 }
            return rename(root + a, root + b) == 0 ? Outcome(text: "ok", removed: replaced.map { [$0] } ?? []) : failure("rename")
        case .mkdir(let p):
            return mkdir(root + p, 0o755) == 0 ? Outcome(text: "ok") : failure("mkdir")
        case .rmdir(let p):
            return rmdir(root + p) == 0 ? Outcome(text: "ok") : failure("rmdir")
        case .unlink(let p):
            let victim = fileInode(root + p)
            return unlink(root + p) == 0 ? Outcome(text: "ok", removed: victim.map { [$0] } ?? []) : failure("unlink")
        case .removeTree(let p):
            var st = stat()
            guard lstat(root + p, &st) == 0 else { return failure("lstat") }
            guard st.st_mode & S_IFMT == S_IFDIR else { return Outcome(text: "not a folder") }
            var removed: [UInt64] = []
            let ok = removeTree(root + p, &removed)
            var outcome = ok ? Outcome(text: "ok") : failure("rm -r")
            outcome.removed = removed
            return outcome
        case .chmodX(let p):
            var st = stat()
            guard lstat(root + p, &st) == 0 else { return failure("lstat") }
            guard st.st_mode & S_IFMT == S_IFREG else { return Outcome(text: "not a file") }
            let mode = st.st_mode & 0o100 != 0 ? st.st_mode & 0o666 : (st.st_mode & 0o777) | 0o111
            return chmod(root + p, mode) == 0 ? Outcome(text: String(format: "ok (%o)", mode)) : failure("chmod")
        case .symlink(let p, let target):
            return symlink(target, root + p) == 0 ? Outcome(text: "ok") : failure("symlink")
        }
    }

    private func isAppend(_ op: MirrorModelOp) -> Bool { if case .append = op { return true }; return false }

    private func fileSize(_ fd: Int32) -> Int {
        var st = stat()
        return fstat(fd, &st) == 0 ? Int(st.st_size) : 0
    }

    private func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 { if errno == EINTR { continue }; return false }
            done += n
        }
        return true
    }

    private func readAll(_ fd: Int32) -> [UInt8]? {
        let size = fileSize(fd)
        var out = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, size - done, off_t(done)) }
            if n < 0 { if errno == EINTR { continue }; return nil }
            if n == 0 { return nil }
            done += n
        }
        return out
    }

    /// `rm -r`: children first (as the mirror expects a folder's deletion to come: its
    /// children's deletions, then the empty folder's).
    private func removeTree(_ path: String, _ removed: inout [UInt64]) -> Bool {
        var st = stat()
        guard lstat(path, &st) == 0 else { return false }
        if st.st_mode & S_IFMT == S_IFDIR {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                if !removeTree(path + "/" + name, &removed) { return false }
            }
            return rmdir(path) == 0
        }
        guard unlink(path) == 0 else { return false }
        removed.append(UInt64(st.st_ino))
        return true
    }
}

extension MirrorModelOp {
    /// The path an operation names first (the one a content is closed at).
    var path: String {
        switch self {
        case .create(let p, _), .write(let p, _), .append(let p, _), .truncate(let p, _), .rename(let p, _), .mkdir(let p), .rmdir(let p),
             .unlink(let p), .removeTree(let p), .chmodX(let p), .symlink(let p, _):
            return p
        }
    }
}
