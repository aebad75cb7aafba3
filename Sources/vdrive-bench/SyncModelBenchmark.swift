import Foundation
import Server
import Storage
import TestSupport

/// `vdrive-bench sync --model [--seed N] [--ops N] [--devices N] [--dir DIR]`
///
/// The model-based test of the synced workspace (Tests/TestSupport/MirrorModel*.swift),
/// run longer: `--devices` real mounts (3), each with its own state and token, on one
/// embedded `vdrive serve`, carry out `--ops` seeded random operations (5,000) on
/// overlapping paths with unmounts, server restarts and kill -9s of a mount, then every
/// tree must be the same and no required version lost. Prints the seed (replay with
/// `--seed`), the figures of the run, and on a failure every step carried out (exit 1).
enum SyncModelBenchmark {
    static let usage = "       vdrive-bench sync --model [--seed N] [--ops N] [--devices N] [--dir DIR]"

    /// `sync --model` is this benchmark (other modes of `sync` may be others').
    static func isSelected(_ args: [String]) -> Bool { args.contains("--model") }

    static func run(_ args: [String]) throws {
        var model = false
        var seed = UInt64.random(in: 1...UInt64(UInt32.max)), ops = 5_000, devices = 3
        var dir = "/var/tmp/vdrive-bench-sync-model"
        try Bench.parseOptions(args, values: [
            "--seed": { seed = UInt64(try Bench.count($0)) },
            "--ops": { ops = try Bench.count($0) },
            "--devices": { devices = try Bench.count($0) },
            "--dir": { dir = $0 },
        ], flags: ["--model": { model = true }])
        guard model else { throw Bench.UsageError(description: "sync needs a mode: --model\n" + usage) }
        guard devices >= 2 else { throw Bench.UsageError(description: "--devices takes 2 or more (one workspace shared by several devices)") }

        let vdrive = Bench.sibling("vdrive")
        // The folder is emptied first: never one that holds a mount (another run's, or
        // someone's drive), whose files `rm -r` would delete through it.
        let mounts = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        if mounts.split(separator: "\n").contains(where: { line in
            let fields = line.split(separator: " ")
            return fields.count > 4 && (fields[4] == dir || fields[4].hasPrefix(dir + "/"))
        }) {
            throw Bench.UsageError(description: "\(dir) holds a mount (another run?): give another --dir, or unmount it first")
        }
        try Bench.sh("rm -rf '\(dir)' && mkdir -p '\(dir)'")
        // Removed after the mounts and the server stopped (defers run last first), and
        // only after a run that passed (`KEEP=1` keeps it too): a failure's states and logs stay.
        var passed = false
        defer { if passed && ProcessInfo.processInfo.environment["KEEP"] == nil { _ = try? Bench.sh("rm -rf '\(dir)'") } }
        let world = try ModelWorld(vdrive: vdrive, dir: dir, devices: devices)
        defer { world.stop() }
        let options = MirrorModelOptions(seed: seed, operations: ops, devices: devices)
        let run = MirrorModelRun(options, world: world)
        let report: MirrorModelReport
        do { report = try run.run() } catch {
            run.printTrace()
            throw error
        }
        print(Bench.table(["devices", "operations", "refused", "ops/s", "disruptions", "versions required", "kept", "conflict copies",
                           "nodes", "schedule (s)", "convergence (s)", "total (s)"], [[
            "\(devices)", "\(report.operations)", "\(report.failedOperations)", Bench.f(Double(report.operations) / report.scheduleSeconds, 1),
            "\(report.disruptions)", "\(report.requiredVersions)", "\(report.keptVersions)", "\(report.conflictCopies)", "\(report.finalNodes)",
            Bench.f(report.scheduleSeconds, 1), Bench.f(report.convergenceSeconds, 1), Bench.f(report.totalSeconds, 1),
        ]]))
        print("sync --model: \(report.summary)")
        if !report.problems.isEmpty {
            run.printTrace()
            throw Bench.Failure(description: "the model found \(report.problems.count) problem(s), replay with --seed \(seed) --ops \(ops) --devices \(devices):\n"
                                + report.problems.joined(separator: "\n"))
        }
        passed = true
    }

    /// Mounts of one embedded server, in `dir`: `server/`, and `dN/` per device (its mount
    /// point, state, XDG folders and token).
    final class ModelWorld: MirrorModelWorld {
        let vdrive: String
        let dir: String
        let deviceCount: Int
        private var server: RunningServer?
        private var listen = "127.0.0.1:0"
        private var url = ""
        private var foreground: [Int: Process] = [:]

        init(vdrive: String, dir: String, devices: Int) throws {
            self.vdrive = vdrive
            self.dir = dir
            deviceCount = devices
            try FileManager.default.createDirectory(atPath: dir + "/server", withIntermediateDirectories: true)
            let registry = try DeviceRegistry(dataDirectory: dir + "/server")
            for d in 0..<devices {
                try FileManager.default.createDirectory(atPath: folder(d) + "/mnt", withIntermediateDirectories: true)
                try registry.add("device\(d)").write(toFile: folder(d) + "/token", atomically: true, encoding: .utf8)
            }
            try startServer()
            for d in 0..<devices { try mount(d) }
        }

        func folder(_ d: Int) -> String { dir + "/d\(d)" }
        func mountPoint(_ d: Int) -> String { folder(d) + "/mnt" }

        private var environment: (Int) -> [String: String] {
            { [dir] d in
                var env = ProcessInfo.processInfo.environment
                env["XDG_DATA_HOME"] = dir + "/d\(d)/xdg"
                env["XDG_CONFIG_HOME"] = dir + "/d\(d)/config"
                env["XDG_RUNTIME_DIR"] = dir + "/d\(d)/run"
                env["VDRIVE_MIRROR_HOLD"] = "20"
                return env
            }
        }

        private var mountArguments: (Int) -> [String] {
            { [unowned self] d in ["mount", mountPoint(d), "--state", folder(d) + "/state", "--server", url, "--token-file", folder(d) + "/token"] }
        }

        private func vdriveCommand(_ d: Int, _ arguments: [String]) throws {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: vdrive)
            p.arguments = arguments
            p.environment = environment(d)
            p.standardOutput = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
            if p.terminationStatus != 0 { throw Bench.Failure(description: "vdrive \(arguments.joined(separator: " ")) failed (\(p.terminationStatus))") }
        }

        func mount(_ d: Int) throws {
            try vdriveCommand(d, mountArguments(d))
            try Bench.waitForMount(mountPoint(d))
        }

        func unmount(_ d: Int) throws {
            if let p = foreground.removeValue(forKey: d) {
                try Bench.sh("fusermount3 -u '\(mountPoint(d))'")
                p.waitUntilExit()
                return
            }
            try vdriveCommand(d, ["unmount", mountPoint(d)])
        }

        func mountForeground(_ d: Int) throws {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: vdrive)
            p.arguments = mountArguments(d) + ["-f"]
            p.environment = environment(d)
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            foreground[d] = p
            try Bench.waitForMount(mountPoint(d))
        }

        func kill9(_ d: Int) {
            guard let p = foreground.removeValue(forKey: d) else { return }
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            _ = try? Bench.sh("fusermount3 -u -z '\(mountPoint(d))'")
        }

        func stopServer() {
            server?.stop()
            server = nil
        }

        func startServer() throws {
            let started = try RunningServer(vdrive: vdrive, data: dir + "/server", extra: [], errors: dir + "/server.log", listen: listen)
            server = started
            url = started.base
            listen = String(started.base.split(separator: "/").last ?? "127.0.0.1:0")
        }

        func serverVersionHashes() -> Set<String> {
            guard let db = try? Database(path: dir + "/server/server.db") else { return [] }
            return Set((try? db.query("SELECT DISTINCT hash FROM tree_versions") { $0.string(0) ?? "" }) ?? [])
        }

        func printLogs() {
            for d in 0..<deviceCount {
                let log = (try? String(contentsOfFile: folder(d) + "/state/vdrive.log", encoding: .utf8)) ?? "(no log)"
                print("--- d\(d) log:\n" + log.split(separator: "\n").suffix(30).joined(separator: "\n"))
            }
        }

        func stop() {
            for d in 0..<deviceCount {
                kill9(d)
                if Bench.isMounted(mountPoint(d)) { _ = try? unmount(d) }
                if Bench.isMounted(mountPoint(d)) { _ = try? Bench.sh("fusermount3 -u -z '\(mountPoint(d))'") }
            }
            stopServer()
        }
    }
}
