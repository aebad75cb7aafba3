import Foundation

/// `vdrive-bench posix --pjdfstest DIR [options]` (see `usage`)
///
/// pjdfstest (POSIX conformance of file system calls) run with `prove -r` on a fresh
/// mount of the drive and, in the same run, on a plain folder of the same ext4 disk.
/// Each test folder (chmod, ftruncate, ...) is one `prove` with a deadline, so a stall
/// costs one folder, not the run. Prints, per test file, the failed test numbers on
/// each side, and which failures are the mount's own (ext4 passes them). Needs root.
/// pjdfstest is built by hand from its source (Docs/posix.md says how).
enum PosixBenchmark {
    static let usage = """
        usage: vdrive-bench posix --pjdfstest DIR [--dir DIR] [--timeout S] [--only ext4,vdrive] [--tests chmod,ftruncate,...]
        """

    struct Options {
        var pjdfstest = ""
        var dir = "/var/tmp/vdrive-bench-posix"
        var timeout = 900.0
        var only: Set<String>? = nil
        var tests: [String]? = nil
    }

    /// What prove said of one test file.
    struct FileResult {
        var failed: String = ""       // "15" or "3-4, 7"
        var notes: [String] = []      // "Parse errors: ...", "Non-zero exit status: 1"
        var isFailure: Bool { !failed.isEmpty || !notes.isEmpty }
        var text: String {
            var parts: [String] = []
            if !failed.isEmpty { parts.append("failed " + failed) }
            parts += notes
            return parts.joined(separator: "; ")
        }
    }

    /// One side (ext4 or the mount): per test file, what failed; per folder, a timeout.
    struct SideResult {
        var files: [String: FileResult] = [:]
        var timedOut: [String] = []
        var totals = ""        // prove's "Files=..., Tests=..." lines, one per folder, summed below
        var testFiles = 0, tests = 0
    }

    static func run(_ args: [String]) throws {
        var o = Options()
        var help = false
        try Bench.parseOptions(args, values: [
            "--pjdfstest": { o.pjdfstest = $0 },
            "--dir": { o.dir = $0 },
            "--timeout": { o.timeout = try Bench.number($0, above0: true) },
            "--only": { o.only = Set($0.split(separator: ",").map(String.init)) },
            "--tests": { o.tests = $0.split(separator: ",").map(String.init) },
        ], flags: ["--help": { help = true }, "-h": { help = true }])
        if help { say(usage); return }
        let root = URL(fileURLWithPath: o.pjdfstest).standardizedFileURL.path
        guard !o.pjdfstest.isEmpty, FileManager.default.isExecutableFile(atPath: root + "/pjdfstest"),
              FileManager.default.fileExists(atPath: root + "/tests/conf") else {
            throw Bench.Failure(description: "--pjdfstest DIR must be a built pjdfstest folder (DIR/pjdfstest and DIR/tests/conf); see Docs/posix.md\n\(usage)")
        }
        guard getuid() == 0 else { throw Bench.Failure(description: "pjdfstest needs root (it changes owners and switches users)") }
        let folders = try o.tests ?? FileManager.default.contentsOfDirectory(atPath: root + "/tests").filter {
            var isDir: ObjCBool = false
            return FileManager.default.fileExists(atPath: root + "/tests/" + $0, isDirectory: &isDir) && isDir.boolValue
        }.sorted()

        let d = o.dir
        BenchMounts.shared.unmountOnSignals()
        defer { BenchMounts.shared.unmountAll() }
        if Bench.isMounted(d + "/mnt") { _ = TimedCommand.run("fusermount3 -u -z \(d)/mnt", timeout: 30) }
        _ = TimedCommand.run("rm -rf \(d)", timeout: 600)
        for sub in ["ext4", "mnt", "logs"] { try FileManager.default.createDirectory(atPath: "\(d)/\(sub)", withIntermediateDirectories: true) }

        var sides: [(String, SideResult)] = []
        if o.only?.contains("ext4") ?? true {
            let (_, fs) = TimedCommand.output("df -PT \(d)/ext4 | tail -1 | awk '{print $2}'", timeout: 30)
            let name = "plain folder (\(fs.trimmingCharacters(in: .whitespacesAndNewlines)))"
            say("pjdfstest on \(name), \(d)/ext4 ...")
            sides.append((name, runSide(root: root, folders: folders, cwd: "\(d)/ext4", label: "ext4", o)))
        }
        if o.only?.contains("vdrive") ?? true {
            let pid = try TimedCommand.spawn([Bench.sibling("vdrive"), "mount", "\(d)/mnt", "--state", "\(d)/state", "-f"], output: "\(d)/logs/vdrive.log")
            try Bench.waitForMount("\(d)/mnt")
            BenchMounts.shared.add(.init(path: "\(d)/mnt", pid: pid))
            say("pjdfstest on the drive, \(d)/mnt ...")
            sides.append(("vdrive", runSide(root: root, folders: folders, cwd: "\(d)/mnt", label: "vdrive", o)))
            BenchMounts.shared.unmount(path: "\(d)/mnt")
        }

        say("")
        say(Bench.table(["pjdfstest"] + sides.map(\.0), [
            ["test files run"] + sides.map { String($0.1.testFiles) },
            ["tests run"] + sides.map { String($0.1.tests) },
            ["test files with a failure"] + sides.map { String($0.1.files.values.filter(\.isFailure).count) },
            ["test folders that timed out"] + sides.map { $0.1.timedOut.isEmpty ? "0" : $0.1.timedOut.joined(separator: ", ") },
        ]))
        let failing = Set(sides.flatMap { $0.1.files.filter { $0.value.isFailure }.keys }).sorted()
        if !failing.isEmpty {
            say(Bench.table(["failures per test file"] + sides.map(\.0),
                              failing.map { f in [f] + sides.map { $0.1.files[f].map { $0.isFailure ? $0.text : "ok" } ?? "ok" } }))
        }
        if sides.count == 2 {
            let (ext4, drive) = (sides[0].1, sides[1].1)
            let own = failing.filter { drive.files[$0]?.isFailure == true && ext4.files[$0]?.isFailure != true }
            say("Failing on the mount and passing on ext4: " + (own.isEmpty ? "none" : own.joined(separator: ", ")))
        }
        say("prove's output per folder: \(d)/logs/")
    }

    /// Runs `prove -r` on every test folder, from inside `cwd`.
    static func runSide(root: String, folders: [String], cwd: String, label: String, _ o: Options) -> SideResult {
        var side = SideResult()
        for folder in folders {
            let log = "\(o.dir)/logs/\(label)-\(folder).txt"
            let work = "\(cwd)/\(folder)"
            try? FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            chmod(work, 0o777)
            let started = Bench.now()
            let out = TimedCommand.run("cd '\(work)' && prove -r '\(root)/tests/\(folder)'", timeout: o.timeout, log: log)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            parse(text, into: &side, root: root)
            if case .timedOut = out { side.timedOut.append(folder) }
            let what: String
            switch out {
            case .finished(0, _): what = "all passed"
            case .finished(let status, _): what = "some failed (prove \(TimedCommand.describe(status)))"
            case .timedOut(let after): what = "timeout after \(Int(after)) s"
            }
            say("  \(folder): \(what), \(Bench.f(Bench.now() - started, 1)) s")
        }
        return side
    }

    /// Reads prove's output: the per-file lines ("…/00.t .. ok", "… Failed 1/26 subtests")
    /// for the count of files and tests, and the "Test Summary Report" for what failed.
    static func parse(_ text: String, into side: inout SideResult, root: String) {
        var current: String?
        var lastKey: String?
        var inSummary = false
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = String(raw)
            if line.hasPrefix("Test Summary Report") { inSummary = true; continue }
            if line.hasPrefix("Files=") {
                // "Files=3, Tests=120, ..."
                let parts = line.split(separator: ",")
                for p in parts {
                    let kv = p.trimmingCharacters(in: .whitespaces).split(separator: "=")
                    if kv.count == 2, kv[0] == "Files" { side.testFiles += Int(kv[1]) ?? 0 }
                    if kv.count == 2, kv[0] == "Tests" { side.tests += Int(kv[1]) ?? 0 }
                }
                inSummary = false
                continue
            }
            guard inSummary, !line.hasPrefix("---") else { continue }
            if !line.hasPrefix(" "), let paren = line.range(of: " (Wstat") {
                var name = String(line[..<paren.lowerBound])
                if name.hasPrefix(root + "/tests/") { name.removeFirst(root.count + 7) }
                current = name
                side.files[name, default: FileResult()] = side.files[name] ?? FileResult()
                lastKey = nil
                continue
            }
            guard let file = current else { continue }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            if let colon = trimmed.range(of: ":") {
                let key = String(trimmed[..<colon.lowerBound])
                let value = trimmed[colon.upperBound...].trimmingCharacters(in: .whitespaces)
                if key.hasPrefix("Failed test") || key.hasPrefix("TODO passed") {
                    if key.hasPrefix("Failed test") { side.files[file]!.failed += (side.files[file]!.failed.isEmpty ? "" : ", ") + value }
                    lastKey = key
                } else {
                    side.files[file]!.notes.append(trimmed)
                    lastKey = key
                }
            } else if lastKey?.hasPrefix("Failed test") == true {
                side.files[file]!.failed += " " + trimmed   // a wrapped list of numbers
            }
        }
    }
}
