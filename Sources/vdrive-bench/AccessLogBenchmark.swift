import Client
import Foundation
import HTTPClient
import Protocol
import Server
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive-bench server --access-log-only` (and the last row of a full run): what the
/// access log costs. The same work against a fresh `vdrive serve --access-log off` and
/// `--access-log stderr` (its stderr in a file, as journald would take it), alternating
/// round by round so that load from elsewhere spreads over both:
///  - small requests: 4 threads, each on one kept-alive connection, alternating
///    `GET /v1/health` and an authenticated `GET /v1/watermark` (a record read): the
///    worst case, one line per tiny reply;
///  - a backup: a file uploaded with our client (tus PATCHes of 4 MiB, one line each).
enum AccessLogBenchmark {
    struct Round {
        let requestsPerSecond: Double
        let serverMicrosecondsPerRequest: Double
        let uploadMBps: Double
        let logBytes: Int64
    }

    static let threads = 4
    static let requestsPerThread = 2_500

    static func run(_ o: ServerBenchmark.Options) throws -> (off: [Round], on: [Round]) {
        let mib = min(o.sizeMiB, 512)
        let file = o.dir + "/access-payload"
        let manifest = try ServerBenchmark.makeFile(file, mib: mib)
        defer { try? FileManager.default.removeItem(atPath: file) }
        print("vdrive-bench server: access log off vs stderr, \(threads * requestsPerThread) small requests and a \(mib) MiB upload, \(o.repeats) rounds each, alternating")
        var off: [Round] = [], on: [Round] = []
        for round in 1...o.repeats {
            for mode in ["off", "stderr"] {
                let r = try measure(o, mode: mode, file: file, manifest: manifest)
                print(String(format: "round %d, --access-log %@: %.0f requests/s, %.1f µs server CPU per request, upload %.0f MB/s, log %lld bytes",
                             round, mode, r.requestsPerSecond, r.serverMicrosecondsPerRequest, r.uploadMBps, r.logBytes))
                if mode == "off" { off.append(r) } else { on.append(r) }
            }
        }
        return (off, on)
    }

    static func measure(_ o: ServerBenchmark.Options, mode: String, file: String, manifest: BlockManifest) throws -> Round {
        let data = o.dir + "/data-access-" + mode
        try? FileManager.default.removeItem(atPath: data)
        defer { try? FileManager.default.removeItem(atPath: data) }
        let token = try DeviceRegistry(dataDirectory: data).add("bench")
        let log = o.dir + "/access-" + mode + ".log"
        try? FileManager.default.removeItem(atPath: log)
        defer { try? FileManager.default.removeItem(atPath: log) }
        let server = try RunningServer(vdrive: o.vdrive, data: data, extra: ["--access-log", mode], errors: log)
        defer { server.stop() }

        let cpuBefore = server.cpuSeconds()
        let start = Bench.now()
        let base = server.base
        Bench.onThreads(threads) { _ in
            let connection = HTTPConnection()
            for i in 0..<requestsPerThread {
                let reply = i % 2 == 0
                    ? try? connection.perform(method: "GET", url: base + "/v1/health", headers: [], body: .none)
                    : try? connection.perform(method: "GET", url: base + "/v1/watermark", headers: ["Authorization: Bearer \(token)"], body: .none)
                precondition(reply?.status == 200, "the server did not answer a small request")
            }
        }
        let wall = Bench.now() - start
        let requests = Double(threads * requestsPerThread)
        let cpu = server.cpuSeconds() - cpuBefore

        let client = WorkspaceClient(baseURL: base, token: token)
        let fd = open(file, O_RDONLY)
        defer { close(fd) }
        let uploadStart = Bench.now()
        try client.uploadFile(fd: fd, size: manifest.size, manifest: manifest, chunkSize: 4 << 20)
        let uploadWall = Bench.now() - uploadStart
        var st = stat()
        let logBytes = stat(log, &st) == 0 ? Int64(st.st_size) : 0
        return Round(requestsPerSecond: requests / wall, serverMicrosecondsPerRequest: cpu / requests * 1e6,
                     uploadMBps: Double(manifest.size) / 1e6 / uploadWall, logBytes: logBytes)
    }

    static func report(_ runs: (off: [Round], on: [Round])) {
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let offRate = median(runs.off.map(\.requestsPerSecond)), onRate = median(runs.on.map(\.requestsPerSecond))
        let offCPU = median(runs.off.map(\.serverMicrosecondsPerRequest)), onCPU = median(runs.on.map(\.serverMicrosecondsPerRequest))
        let offUpload = median(runs.off.map(\.uploadMBps)), onUpload = median(runs.on.map(\.uploadMBps))
        print("")
        print("Access log, medians of \(runs.off.count) rounds:")
        print("| --access-log | small requests/s | server CPU µs per request | upload MB/s |")
        print("|---|---:|---:|---:|")
        print(String(format: "| off | %.0f | %.1f | %.0f |", offRate, offCPU, offUpload))
        print(String(format: "| stderr | %.0f | %.1f | %.0f |", onRate, onCPU, onUpload))
        print(String(format: "with the log: %.2f× the request rate, %+.1f µs server CPU per request, %.2f× the upload rate",
                     onRate / offRate, onCPU - offCPU, onUpload / offUpload))
    }
}
