// vdrive-bench: benchmarks that print figures side by side in one run.
// Usage: vdrive-bench <drive|server> [options]; see each benchmark's file.
import Foundation

let benchArguments = Array(CommandLine.arguments.dropFirst())
let benchmarks: [String: ([String]) throws -> Void] = [
    "drive": DriveBenchmark.run,
]
guard let name = benchArguments.first, let bench = benchmarks[name] else {
    print("Usage: vdrive-bench <\(benchmarks.keys.sorted().joined(separator: "|"))> [options]")
    exit(64)
}
do {
    try bench(Array(benchArguments.dropFirst()))
} catch {
    FileHandle.standardError.write(Data("vdrive-bench: \(error)\n".utf8))
    exit(1)
}
