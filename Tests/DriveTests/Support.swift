import Foundation
import Testing
import Storage
import Crypto
@_exported import TestSupport
@_exported import TestTraits

/// The built `vdrive` binary: beside the test bundle in .build/<config>/.
let vdriveBinary: String = {
    if let env = ProcessInfo.processInfo.environment["VDRIVE_BIN"] { return env }
    var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent("vdrive").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    return root.appendingPathComponent(".build/debug/vdrive").path
}()

let fixturesPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures").path

func isMounted(_ path: String) -> Bool {
    let info = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
    return info.split(separator: "\n").contains { $0.split(separator: " ").count > 4 && $0.split(separator: " ")[4] == path }
}

/// A real mount of the drive in a temporary folder, through the `vdrive` binary.
/// Always call `stop()` (in a defer): it unmounts and removes the folders.
final class MountedDrive {
    let root: TemporaryDirectory
    let mountPoint: String
    let state: String
    var foreground: Process?
    var foregroundPID: Int32? { foreground?.processIdentifier }

    /// Extra `vdrive mount` arguments (server, token file, --camera-backup).
    var mountArguments: [String]
    var extraEnvironment: [String: String]

    init(state: String? = nil, label: String = "vdrive-mount", arguments: [String] = [], environment: [String: String] = [:],
         start startNow: Bool = true) throws {
        root = TemporaryDirectory(label)
        mountPoint = root.path + "/mnt"
        self.state = state ?? root.path + "/state"
        mountArguments = arguments
        extraEnvironment = environment
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        if startNow { try start() }
    }

    var environment: [String: String] {
        var env = ["XDG_DATA_HOME": root.path + "/xdg", "XDG_RUNTIME_DIR": root.path + "/run", "XDG_CONFIG_HOME": root.path + "/config"]
        for (k, v) in extraEnvironment { env[k] = v }
        return env
    }

    /// Runs another vdrive verb with this drive's environment (settings, status).
    func vdrive(_ arguments: [String]) throws -> CommandResult {
        try runCommand(vdriveBinary, arguments, environment: environment)
    }

    /// Mounts in the background and returns once the mount is ready.
    func start() throws {
        let r = try runCommand(vdriveBinary, ["mount", mountPoint, "--state", state] + mountArguments, environment: environment)
        guard r.status == 0, isMounted(mountPoint) else {
            throw TestFailure("vdrive mount failed (\(r.status)): \(r.stderr)")
        }
    }

    /// Mounts in the foreground as a child process we can SIGKILL.
    func startForeground() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: vdriveBinary)
        p.arguments = ["mount", mountPoint, "--state", state, "-f"] + mountArguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        p.environment = env
        // What a foreground mount says goes to its stderr, not to the log file: kept where
        // a failing test prints the logs from.
        _ = FileManager.default.createFile(atPath: foregroundLog, contents: nil)
        p.standardError = FileHandle(forWritingAtPath: foregroundLog)
        try p.run()
        foreground = p
        try eventually("the foreground mount at \(mountPoint) is ready", within: 5, poll: 0.025) { isMounted(mountPoint) }
    }

    /// Where a foreground mount's stderr goes.
    var foregroundLog: String { root.path + "/foreground.log" }

    func kill9() {
        guard let p = foreground else { return }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        foreground = nil
        _ = try? runCommand("/bin/fusermount3", ["-u", "-z", mountPoint])
    }

    func unmount() throws {
        if let p = foreground {
            _ = try runCommand("/bin/fusermount3", ["-u", mountPoint])
            p.waitUntilExit()
            foreground = nil
            return
        }
        let r = try runCommand(vdriveBinary, ["unmount", mountPoint], environment: environment)
        if r.status != 0 { throw TestFailure("unmount failed: \(r.stderr)") }
    }

    func stop() {
        if foreground != nil { kill9() }
        if isMounted(mountPoint) {
            _ = try? unmount()
            if isMounted(mountPoint) { _ = try? runCommand("/bin/fusermount3", ["-u", "-z", mountPoint]) }
        }
        root.remove()
    }

    func path(_ relative: String) -> String { mountPoint + "/" + relative }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

func sha256(ofFile path: String) throws -> String {
    let fd = try FileIO.open(path, O_RDONLY)
    defer { FileIO.close(fd) }
    return try BlobStore.hash(fd: fd).hex
}

func writeFile(_ path: String, _ bytes: [UInt8], flags: Int32 = O_WRONLY | O_CREAT | O_TRUNC) throws {
    let fd = try FileIO.open(path, flags, 0o644)
    try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
    if close(fd) != 0 { throw Errno.current }
}

func readFile(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else { throw Errno.current }
    return Array(data)
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var x = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    for i in 0..<count {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17
        out[i] = UInt8(truncatingIfNeeded: x)
    }
    return out
}

/// Stores `bytes` in a block store as one file named by their SHA-256, the way the
/// whole-blob version stored a file (migration fixtures).
@discardableResult
func storeWholeBlob(_ bytes: [UInt8], in store: BlobStore) throws -> SHA256Digest {
    let digest = SHA256Hasher.digest(bytes)
    let (fd, path) = try store.makeStagingFile()
    try bytes.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
    FileIO.close(fd)
    try store.adopt(stagingPath: path, as: digest)
    return digest
}
