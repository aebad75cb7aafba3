// vdrive-bench: benchmarks that print figures side by side in one run (never timed tests).
// Usage: vdrive-bench <drive|server> [options]; see DriveBenchmark.swift and ServerBenchmark.swift.
import Foundation

let benchArguments = Array(CommandLine.arguments.dropFirst())
switch benchArguments.first {
case "drive":
    do {
        try DriveBenchmark.run(Array(benchArguments.dropFirst()))
    } catch {
        FileHandle.standardError.write(Data("vdrive-bench: \(error)\n".utf8))
        exit(1)
    }
case "backup":
    do {
        try BackupBenchmark.run(Array(benchArguments.dropFirst()))
    } catch {
        FileHandle.standardError.write(Data("vdrive-bench: \(error)\n".utf8))
        exit(1)
    }
case "server":
    exit(ServerBenchmark.run(Array(benchArguments.dropFirst())))
default:
    print("usage: vdrive-bench drive [--dir DIR] [--big-mib N] [--files N] [--list N]")
    print("       vdrive-bench backup [--photos N] [--photo-mb N] [--idle-seconds N] [--kill-mib N] [--rss-gib N] [--entries N] [--dir DIR]")
    print("       vdrive-bench server [--size-mib N] [--rss-size-mib N] [--chunk-mib N] [--repeat N] [--dir DIR] [--vdrive PATH]")
    exit(64)
}
