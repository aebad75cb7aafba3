import Foundation

/// Helpers shared by the benchmarks: timing, shell commands, cache dropping.
enum Bench {
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Seconds `body` took.
    static func time(_ body: () throws -> Void) rethrows -> Double {
        let start = now()
        try body()
        return now() - start
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// Runs `body(0..<count)` on `count` threads at once and waits for all of them.
    /// Not `DispatchQueue.concurrentPerform`: that runs at most one iteration per core,
    /// so 8 simulated devices on 2 cores would be 2 devices at a time.
    static func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let group = DispatchGroup()
        for i in 0..<count {
            group.enter()
            let thread = Thread { body(i); group.leave() }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
    }

    /// Runs a command, failing the benchmark when it fails.
    @discardableResult
    static func sh(_ command: String) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", command]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        if p.terminationStatus != 0 { throw Failure(description: "command failed (\(p.terminationStatus)): \(command)") }
        return String(decoding: data, as: UTF8.self)
    }

    /// Runs `body` under `perf record -g -p pid` into `output`, then writes the report by
    /// symbol (`output.txt`, Swift names demangled), by library (`output.dso.txt`) and by
    /// thread (`output.threads.txt`: the drive's and the server's threads are named).
    /// `VDRIVE_BENCH_CALL_GRAPH=dwarf` unwinds with DWARF at 499 Hz instead: frame pointers
    /// stop at libc, so a `pread` is not charged to its Swift caller.
    static func profile(pid: pid_t, into output: String, during body: () throws -> Void) throws {
        let rec = Process()
        rec.executableURL = URL(fileURLWithPath: "/usr/bin/perf")
        let callGraph = ProcessInfo.processInfo.environment["VDRIVE_BENCH_CALL_GRAPH"] == "dwarf"
            ? ["-F", "499", "--call-graph", "dwarf,16384"] : ["-F", "2999", "-g"]
        rec.arguments = ["record"] + callGraph + ["-p", "\(pid)", "-o", output]
        rec.standardOutput = FileHandle.nullDevice
        rec.standardError = FileHandle.nullDevice
        try rec.run()
        usleep(500_000)
        let outcome = Result { try body() }
        kill(rec.processIdentifier, SIGINT)
        rec.waitUntilExit()
        try outcome.get()
        try sh("perf report -i \(output) --no-children --sort dso,sym --stdio -g none 2>/dev/null | swift demangle --simplified > \(output).txt 2>/dev/null || perf report -i \(output) --no-children --sort dso,sym --stdio -g none > \(output).txt 2>/dev/null")
        try sh("perf report -i \(output) --no-children --sort dso --stdio -g none > \(output).dso.txt 2>/dev/null")
        try sh("perf report -i \(output) --no-children --sort comm --stdio -g none > \(output).threads.txt 2>/dev/null")
    }

    static func dropCaches() {
        sync()
        _ = try? "3\n".write(toFile: "/proc/sys/vm/drop_caches", atomically: false, encoding: .utf8)
    }

    /// Peak resident set size of a process, in MB (VmHWM).
    static func peakRSS(pid: Int32) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kb = line.split(separator: " ").compactMap { Double($0) }.first ?? 0
            return kb / 1024
        }
        return nil
    }

    /// CPU seconds the whole machine has been busy (every process and kernel thread:
    /// /proc/stat's user, nice, system, irq, softirq and steal, all cores). Counts work
    /// a command leaves to kernel threads, such as writing back its files.
    static func machineBusySeconds() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return 0 }
        let v = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard v.count >= 8 else { return 0 }
        // user nice system idle iowait irq softirq steal
        return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// User + system CPU seconds a running process has used (/proc/PID/stat).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state(0) ... utime(11) stime(12).
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ((Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)) / ticks
    }

    /// The CPUs this process may run on, as /proc/self/status lists them ("0-1").
    static func allowedCPUs() -> String {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }
        return line.map { $0.dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces) } ?? "?"
    }

    /// The CPUs of a list as taskset and /proc write it ("0-2,5").
    static func cpuSet(_ list: String) -> Set<Int> {
        var out: Set<Int> = []
        for part in list.split(separator: ",") {
            let ends = part.split(separator: "-").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            if let first = ends.first, let last = ends.last, first <= last { out.formUnion(first...last) }
        }
        return out
    }

    /// CPU seconds of reaped child processes so far (getrusage RUSAGE_CHILDREN).
    static func childrenCPUSeconds() -> Double { rusageSeconds(RUSAGE_CHILDREN) }

    /// CPU seconds of this process so far, all its threads (getrusage RUSAGE_SELF).
    static func ownCPUSeconds() -> Double { rusageSeconds(RUSAGE_SELF) }

    static func rusageSeconds(_ who: __rusage_who) -> Double {
        var u = rusage()
        getrusage(__rusage_who_t(who.rawValue), &u)
        return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
    }

    /// A counter of /proc/PID/io ("rchar", "wchar").
    static func ioCounter(pid: Int32, _ name: String) -> Int64 {
        guard let io = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) else { return 0 }
        for line in io.split(separator: "\n") where line.hasPrefix(name + ":") {
            return Int64(line.split(separator: " ").last ?? "0") ?? 0
        }
        return 0
    }

    static func isMounted(_ path: String) -> Bool {
        let info = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        return info.split(separator: "\n").contains { $0.split(separator: " ").count > 4 && $0.split(separator: " ")[4] == path }
    }

    static func waitForMount(_ path: String) throws {
        for _ in 0..<400 where !isMounted(path) { usleep(25_000) }
        if !isMounted(path) { throw Failure(description: "\(path) did not mount") }
    }

    /// A sibling executable of this benchmark (vdrive is built beside vdrive-bench).
    static func sibling(_ name: String) -> String {
        let me = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: me).deletingLastPathComponent().appendingPathComponent(name).path
    }

    static func table(_ header: [String], _ rows: [[String]]) -> String {
        var widths = header.map(\.count)
        for r in rows { for (i, c) in r.enumerated() { widths[i] = max(widths[i], c.count) } }
        func line(_ cells: [String]) -> String {
            "| " + cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: " | ") + " |"
        }
        var out = line(header) + "\n"
        out += "|" + widths.map { String(repeating: "-", count: $0 + 2) }.joined(separator: "|") + "|\n"
        for r in rows { out += line(r) + "\n" }
        return out
    }

    static func f(_ x: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", x) }

    /// Parses `--name VALUE` options and bare `--flag`s; anything else is an error naming
    /// it. A value that `count`, `whole` or `number` refuses is an error naming the option.
    static func parseOptions(_ args: [String], values: [String: (String) throws -> Void], flags: [String: () -> Void] = [:]) throws {
        var i = 0
        while i < args.count {
            if let flag = flags[args[i]] {
                flag()
                i += 1
            } else if let value = values[args[i]] {
                guard i + 1 < args.count else { throw UsageError(description: "\(args[i]) needs a value") }
                do { try value(args[i + 1]) } catch let bad as BadValue {
                    throw UsageError(description: "\(args[i]) takes \(bad.expected), not '\(args[i + 1])'")
                }
                i += 2
            } else {
                throw UsageError(description: "unknown option \(args[i])")
            }
        }
    }

    struct BadValue: Error { let expected: String }

    /// A command line the benchmark cannot run: exit 64 (EX_USAGE), not 1.
    struct UsageError: Error, CustomStringConvertible { let description: String }

    /// A count: a whole number above 0.
    static func count(_ text: String) throws -> Int {
        guard let n = Int(text), n > 0 else { throw BadValue(expected: "a whole number above 0") }
        return n
    }

    /// A size or a number of seconds that may be 0.
    static func whole(_ text: String) throws -> Int {
        guard let n = Int(text), n >= 0 else { throw BadValue(expected: "a whole number, 0 or more") }
        return n
    }

    /// A number (a delay), 0 or more; with `above0`, more than 0 (a rate, a timeout).
    static func number(_ text: String, above0: Bool = false) throws -> Double {
        guard let x = Double(text), x.isFinite, above0 ? x > 0 : x >= 0 else {
            throw BadValue(expected: above0 ? "a number above 0" : "a number, 0 or more")
        }
        return x
    }
}
