// vdrive-bench: benchmarks that print figures side by side in one run (never timed tests).
// Usage: vdrive-bench <drive|posix|backup|server|sync|…> [options]; see DriveBenchmark.swift,
// PosixBenchmark.swift, BackupBenchmark.swift, ServerBenchmark.swift, SyncBenchmark.swift.
import Foundation

/// Runs a benchmark that throws, turning a failure into one line on stderr and exit 1
/// (64, EX_USAGE, for a command line it cannot run).
func runReportingFailure(_ body: ([String]) throws -> Void, _ arguments: [String]) -> Int32 {
    do {
        try body(arguments)
        return 0
    } catch {
        FileHandle.standardError.write(Data("vdrive-bench: \(error)\n".utf8))
        return error is Bench.UsageError ? 64 : 1
    }
}

let benchArguments = Array(CommandLine.arguments.dropFirst())
let rest = Array(benchArguments.dropFirst())
switch benchArguments.first {
case "drive": exit(runReportingFailure(DriveBenchmark.run, rest))
case "backup": exit(runReportingFailure(BackupBenchmark.run, rest))
case "server": exit(ServerBenchmark.run(rest))
case "posix": exit(runReportingFailure(PosixBenchmark.run, rest))
case "link": exit(runReportingFailure(LinkBenchmark.run, rest))
case "backups": exit(runReportingFailure(BackupsBenchmark.run, rest))
case "online": exit(runReportingFailure(OnlineBenchmark.run, rest))
case "scale" where ScaleDedup.isSelected(rest): exit(runReportingFailure(ScaleDedup.run, rest))
case "scale": exit(runReportingFailure(ScaleBenchmark.run, rest))
case "restore": exit(runReportingFailure(RestoreBenchmark.run, rest))
case "sync" where SyncModelBenchmark.isSelected(rest): exit(runReportingFailure(SyncModelBenchmark.run, rest))
case "sync": exit(runReportingFailure(SyncBenchmark.run, rest))
default:
    print(DriveBenchmark.usage)
    print(PosixBenchmark.usage)
    print("       vdrive-bench backup [--sections cpu,classic] [--cpu-photos N] [--rounds N] [--perf FILE] [--photos N] [--photo-mb N] [--idle-seconds N] [--kill-mib N] [--rss-gib N] [--entries N] [--dir DIR]")
    print(LinkBenchmark.usage)
    print(BackupsBenchmark.usage)
    print(OnlineBenchmark.usage)
    print(ScaleBenchmark.usage)
    print(RestoreBenchmark.usage)
    print(ScaleDedup.usage)
    print(SyncBenchmark.usage)
    print(SyncModelBenchmark.usage)
    print("       vdrive-bench server [--size-mib N] [--rss-size-mib N] [--chunk-mib N] [--repeat N] [--dir DIR] [--vdrive PATH] [--lockout-only] [--access-log-only] [--long-poll-only] [--long-polls N] [--rates-only] [--tls-only] [--packs] [--pack-blocks N]")
    exit(64)
}
