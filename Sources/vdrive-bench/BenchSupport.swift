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
}
