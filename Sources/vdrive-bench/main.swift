// vdrive-bench: benchmarks that print figures (never timed tests).
// Usage: vdrive-bench <suite> [options]; suites: server (ServerBenchmark.swift).
#if canImport(Glibc)
import Glibc
#endif

let benchArguments = Array(CommandLine.arguments.dropFirst())
switch benchArguments.first {
case "server":
    exit(ServerBenchmark.run(Array(benchArguments.dropFirst())))
default:
    print("usage: vdrive-bench server [--size-mib N] [--rss-size-mib N] [--chunk-mib N] [--repeat N] [--dir DIR] [--vdrive PATH]")
    exit(64)
}
