import Client
import Foundation
import Protocol
import Server
import Storage
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The lockout row of `vdrive-bench server`: a device's backup of 100 photos (2 MiB
/// each, from 127.0.0.1) to a fresh `vdrive serve`, quiet and then while 2,000 slow
/// connections from 127.0.0.2 (headers trickling, bodies trickling, idle keep-alives)
/// are held, their per-address limit raised so that the server admits them all; and
/// `/v1/health` latency (a new connection each time) during each backup.
enum LockoutBenchmark {
    struct Figures {
        let label: String
        let seconds: Double
        let photos: Int
        let bytes: Int64
        let health: [Double]
        let crowdOpen: Int
        var photosPerSecond: Double { Double(photos) / seconds }
        func percentile(_ p: Double) -> Double {
            let sorted = health.sorted()
            return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000
        }
        var row: String {
            String(format: "| %@ | %.1f | %.0f | %.1f | %.1f | %.1f | %d |", label, photosPerSecond, Double(bytes) / 1e6 / seconds,
                   percentile(0.5), percentile(0.99), (health.max() ?? 0) * 1000, crowdOpen)
        }
    }

    static func run(_ o: ServerBenchmark.Options, photos: Int = 100, crowd: Int = 2000) throws -> [Figures] {
        raiseOpenFiles(UInt(crowd) * 2 + 512)
        let folder = o.dir + "/photos"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var files: [(path: String, manifest: BlockManifest)] = []
        for i in 0..<photos {
            let path = folder + "/IMG_\(i).jpg"
            ServerBenchmark.writeAll(path, randomBytes(2 << 20, seed: UInt64(9000 + i)))
            let fd = open(path, O_RDONLY)
            defer { close(fd) }
            files.append((path, try WorkspaceClient.manifest(fd: fd, size: 2 << 20)))
        }
        let extra = ["--max-connections-per-address", String(crowd + 100), "--max-connections", String(crowd + 1000)]
        var rows: [Figures] = []
        for round in 0..<(2 * o.repeats) {
            let loaded = round % 2 == 1
            let label = loaded ? "backup, \(crowd) slow connections held" : "backup, quiet"
            let data = o.dir + "/lockout-data"
            try? FileManager.default.removeItem(atPath: data)
            let token = try DeviceRegistry(dataDirectory: data).add("bench")
            let server = try RunningServer(vdrive: o.vdrive, data: data, extra: extra)
            defer { server.stop(); try? FileManager.default.removeItem(atPath: data) }
            let port = UInt16(server.base.split(separator: ":").last ?? "0") ?? 0
            let held = loaded ? try SlowCrowd(port: port, from: "127.0.0.2", auth: "Authorization: Bearer \(token)", each: crowd / 3) : nil
            let running = NSLock()
            nonisolated(unsafe) var stop = false
            nonisolated(unsafe) var latencies: [Double] = []
            let done = DispatchSemaphore(value: 0)
            Thread {
                var last = Bench.now()
                while !running.withLock({ stop }) {
                    if Bench.now() - last > 1 { held?.trickle(); last = Bench.now() }
                    let t = Bench.now()
                    if healthAnswers(port: port) { running.withLock { latencies.append(Bench.now() - t) } }
                    usleep(50_000)
                }
                done.signal()
            }.start()
            let client = WorkspaceClient(baseURL: server.base, token: token)
            let start = Bench.now()
            for (i, f) in files.enumerated() {
                let fd = open(f.path, O_RDONLY)
                defer { close(fd) }
                try client.uploadFile(fd: fd, size: f.manifest.size, manifest: f.manifest)
                _ = try client.recordFile(FileRecord(path: "Camera Roll/IMG_\(i).jpg", hash: f.manifest.content.hex, size: f.manifest.size,
                                                     blocks: f.manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: Int64(i + 1)))
            }
            let seconds = Bench.now() - start
            running.withLock { stop = true }
            done.wait()
            var open = 0
            if let held { open = held.stillOpen().values.reduce(0, +) }
            let figures = Figures(label: label, seconds: seconds, photos: photos, bytes: Int64(photos) << 21,
                                  health: running.withLock { latencies }, crowdOpen: open)
            print(figures.row)
            rows.append(figures)
        }
        return rows
    }

    /// A fresh connection, `GET /v1/health`, its status line; false on any failure.
    static func healthAnswers(port: UInt16) -> Bool {
        guard let c = try? SlowSocket(port: port, from: "127.0.0.1") else { return false }
        var t = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &t, socklen_t(MemoryLayout<timeval>.size))
        guard c.send("GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n") else { return false }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { recv(c.fd, $0.baseAddress, 512, 0) }
        return n > 12 && buffer[9] == UInt8(ascii: "2")
    }

    static func raiseOpenFiles(_ needed: UInt) {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < needed else { return }
        limit.rlim_cur = min(needed, limit.rlim_max)
        _ = setrlimit(resource, &limit)
    }

    static func report(_ rows: [Figures]) {
        print("")
        print("Lockout (median round of each):")
        print("| run | photos/s | MB/s | health p50 ms | health p99 ms | health max ms | slow connections still open at the end |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        let quiet = rows.filter { $0.crowdOpen == 0 && !$0.label.contains("held") }.sorted { $0.seconds < $1.seconds }
        let loaded = rows.filter { $0.label.contains("held") }.sorted { $0.seconds < $1.seconds }
        guard !quiet.isEmpty, !loaded.isEmpty else { return }
        let (q, l) = (quiet[quiet.count / 2], loaded[loaded.count / 2])
        print(q.row)
        print(l.row)
        print(String(format: "backup rate under load: %.2f× the quiet rate", l.photosPerSecond / q.photosPerSecond))
    }
}
