import Foundation
import DeviceWiring

/// Starting the mount in the background: the command re-runs itself in the
/// foreground mode as a new session leader, with its stdout as a pipe back to us.
/// The child reports "ready" once the kernel has the mount, or one error line with
/// the exit code to use; we print that and exit with it. (Re-running beats fork():
/// forking a Swift process after its runtime started threads is unsafe.)
enum Daemon {
    /// `logPaths`: where the mount process's stderr may go, in order of preference: the
    /// first that can be written (its folder made if missing). A state folder that is no
    /// folder is the child's error to report, so the next place takes its log.
    static func start(arguments: [String], mountPoint: String, logPaths: [String]) throws -> Int32 {
        var logPath = logPaths.last ?? ""
        var logFile: FileHandle?
        for path in logPaths {
            try? FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            if let file = FileHandle(forWritingAtPath: path) ?? createLog(path) {
                logFile = file
                logPath = path
                break
            }
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.executablePath)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardInput = FileHandle.nullDevice
        if let logFile {
            logFile.seekToEndOfFile()
            process.standardError = logFile
        }
        var env = ProcessInfo.processInfo.environment
        env["VDRIVE_DAEMON"] = "1"
        process.environment = env
        do { try process.run() } catch {
            throw CLIError("cannot start the mount process: \(error)", code: ExitCode.osError)
        }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        let reply = String(decoding: data, as: UTF8.self)
        for line in reply.split(separator: "\n") {
            if line == "ready" {
                print("Mounted \(mountPoint) (pid \(process.processIdentifier); log: \(logPath))")
                return ExitCode.ok
            }
            if line.hasPrefix("error ") {
                let parts = line.dropFirst(6).split(separator: " ", maxSplits: 1)
                let code = Int32(parts.first ?? "") ?? ExitCode.software
                throw CLIError(parts.count > 1 ? String(parts[1]) : "mount failed", code: code)
            }
        }
        process.waitUntilExit()
        throw CLIError("the mount process stopped before the mount was ready (exit \(process.terminationStatus)); see \(logPath)", code: ExitCode.software)
    }

    private static func createLog(_ path: String) -> FileHandle? {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return FileHandle(forWritingAtPath: path)
    }

    static var executablePath: String { CommandLine.executablePath }
}

extension CommandLine {
    /// This program's own path, for re-running it.
    static var executablePath: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? arguments[0]
    }
}

/// The child's side of `Daemon`: tells the parent the mount is ready, then detaches
/// stdout (so the parent's read ends) and becomes its own session.
struct ReadyNotifier {
    let enabled: Bool

    func ready() {
        guard enabled else { return }
        write("ready\n")
        let devnull = open("/dev/null", O_WRONLY)
        dup2(devnull, 1)
        close(devnull)
        setsid()
    }

    func failed(_ error: CLIError) {
        guard enabled else { return }
        write("error \(error.code) \(error.message.replacingOccurrences(of: "\n", with: " "))\n")
    }

    private func write(_ text: String) {
        text.withCString { _ = Glibc.write(1, $0, strlen($0)) }
    }
}
