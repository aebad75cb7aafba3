import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive-bench server`: the workspace server's figures, in one run.
///  1. a file uploaded with our client, one tus PATCH per 4 MiB block, vs `curl -T` of the
///     same blocks (PUT /v1/blocks/<hash>, one curl process, one kept-alive connection),
///     each to a fresh `vdrive serve` (MB/s, CPU seconds). The file's blocks are hashed
///     before the clock starts, as the drive has them from the write;
///  2. the same client upload with `--sync-every-patch` (the cost of an fdatasync per PATCH),
///     and over TLS (`--tls-cert/--tls-key`, a private CA made with openssl: the cost of HTTPS);
///     the file downloaded whole and block by block, plain and over TLS;
///  3. server RSS sampled every 20 ms during a larger upload;
///  4. the time to answer a dedup check of 10,000 content hashes against 100,000 stored ones;
///  5. a device's backup with 2,000 slow connections held, and health latency (LockoutBenchmark.swift).
///     `--lockout-only` runs this row alone;
///  6. the access log's cost (AccessLogBenchmark.swift); `--access-log-only` runs it alone.
///  7. RSS and CPU while 5,000 connections hold a long poll of the change feed, and how soon
///     one record answers them all (LongPollBenchmark.swift). `--long-poll-only` runs this row alone.
///  8. 10,000 small blocks up and down one by one and in block packs (PackBenchmark.swift).
///     `--packs` runs this row alone (`--pack-blocks N`).
/// `--rates-only` runs 1 and 2 alone; `--tls-only` the plain and the TLS upload alone,
/// alternated, with each round's TLS/plain ratio.
enum ServerBenchmark {
    struct Options {
        var sizeMiB: Int64 = 2048
        var rssSizeMiB: Int64 = 4096
        /// PATCH size; a block (4 MiB) at most, since every upload is one block.
        var chunkMiB: Int64 = 4
        var dir = "/var/tmp/vdrive-bench"
        var vdrive: String = ""
        var repeats = 3
        var lockoutOnly = false
        var accessLogOnly = false
        var longPollOnly = false
        var longPolls = 5000
        /// The upload and download rows only (1 and 2), for comparing builds side by side.
        var ratesOnly = false
        /// The plain and the TLS upload alone, alternated round by round.
        var tlsOnly = false
        /// The block pack row alone (PackBenchmark.swift), and its number of blocks.
        var packsOnly = false
        var packBlocks = 10_000
    }

    static func run(_ arguments: [String]) -> Int32 {
        var o = Options()
        o.vdrive = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path + "/vdrive"
        do {
            try Bench.parseOptions(arguments, values: [
                "--size-mib": { o.sizeMiB = Int64(try Bench.count($0)) },
                "--rss-size-mib": { o.rssSizeMiB = Int64(try Bench.count($0)) },
                "--chunk-mib": {
                    guard let n = Int64($0), (1...4).contains(n) else { throw Bench.BadValue(expected: "1 to 4 (a PATCH is at most a block)") }
                    o.chunkMiB = n
                },
                "--dir": { o.dir = $0 },
                "--vdrive": { o.vdrive = $0 },
                "--repeat": { o.repeats = try Bench.count($0) },
                "--long-polls": { o.longPolls = try Bench.count($0) },
                "--pack-blocks": { o.packBlocks = try Bench.count($0) },
            ], flags: ["--lockout-only": { o.lockoutOnly = true }, "--access-log-only": { o.accessLogOnly = true },
                       "--long-poll-only": { o.longPollOnly = true }, "--rates-only": { o.ratesOnly = true },
                       "--tls-only": { o.tlsOnly = true }, "--packs": { o.packsOnly = true }])
        } catch {
            print("vdrive-bench server: \(error)")
            return 64
        }
        do {
            try run(o)
            return 0
        } catch {
            print("vdrive-bench server: \(error)")
            return 70
        }
    }

    /// The plain and the TLS upload alternated, each round's figures and ratio as it ends:
    /// on a machine shared with other work the ratio of one round is what can be compared.
    static func compareTLS(_ o: Options, plain: (String, [String], Timed), tls: (String, [String], Timed)) throws {
        var ratios: [Double] = []
        print("| run | MB/s | wall s | client CPU s | server CPU s | server peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for round in 1...o.repeats {
            let p = try measure(o, label: plain.0, extra: plain.1, plain.2)
            let t = try measure(o, label: tls.0, extra: tls.1, tls.2)
            ratios.append(t.mbps / p.mbps)
            print(String(format: "round %d: TLS / plain %.2f", round, t.mbps / p.mbps))
        }
        print("TLS / plain per round: " + ratios.map { String(format: "%.2f", $0) }.joined(separator: ", ")
              + String(format: "; median %.2f×", ratios.sorted()[ratios.count / 2]))
    }

    static func run(_ o: Options) throws {
        try? FileManager.default.removeItem(atPath: o.dir)
        try FileManager.default.createDirectory(atPath: o.dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: o.dir) }
        if o.lockoutOnly { return LockoutBenchmark.report(try LockoutBenchmark.run(o)) }
        if o.accessLogOnly { return AccessLogBenchmark.report(try AccessLogBenchmark.run(o)) }
        if o.longPollOnly { return LongPollBenchmark.report(try LongPollBenchmark.run(o, polls: o.longPolls)) }
        if o.packsOnly { return try PackBenchmark.run(o) }
        print("vdrive-bench server: \(o.sizeMiB) MiB file, \(o.chunkMiB) MiB PATCHes, \(o.repeats) rounds, RSS run \(o.rssSizeMiB) MiB, in \(o.dir)")
        let file = o.dir + "/payload"
        let manifest = try makeFile(file, mib: o.sizeMiB)
        let blockFiles = try splitIntoBlocks(file, manifest: manifest, folder: o.dir + "/blocks")

        // 1. Our client in block PATCHes, the same without Upload-Checksum, curl -T, and
        //    (2.) the client against a server with --sync-every-patch; `--repeat` rounds,
        //    interleaved so that load from elsewhere on the machine spreads over all four.
        func ourUpload(checksum: Bool, caFile: String? = nil) -> (RunningServer, String) throws -> Void {
            { server, token in
                let client = WorkspaceClient(baseURL: server.base, token: token, caFile: caFile)
                let fd = open(file, O_RDONLY)
                defer { close(fd) }
                try client.uploadFile(fd: fd, size: manifest.size, manifest: manifest, chunkSize: o.chunkMiB << 20, checksum: checksum)
                try record(client, manifest)
            }
        }
        let curlUpload: (RunningServer, String) throws -> Void = { server, token in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            p.arguments = ["-sS", "-w", "%{http_code}\\n", "-H", "Authorization: Bearer \(token)"]
                + blockFiles.flatMap { ["-T", $0.path, "-o", "/dev/null", "\(server.base)/v1/blocks/\($0.hash.hex)"] }
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            let codes = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
            p.waitUntilExit()
            guard codes.allSatisfy({ $0 == "201" || $0 == "200" }) else { throw BenchError("curl -T answered \(Set(codes))") }
            try record(WorkspaceClient(baseURL: server.base, token: token), manifest)
        }
        // Downloads, after an upload outside the clock: the whole content (GET /v1/contents,
        // streamed from the blocks) and every block on its own (GET /v1/blocks, a file reply),
        // each hashed by the client as it arrives, into /dev/null.
        func ourDownload(blocks: Bool, caFile: String? = nil) -> Timed {
            Timed(prepare: ourUpload(checksum: true, caFile: caFile), bytes: manifest.size) { server, token in
                let client = WorkspaceClient(baseURL: server.base, token: token, caFile: caFile)
                let fd = open("/dev/null", O_WRONLY)
                defer { close(fd) }
                if blocks {
                    for hash in Set(manifest.blocks) { try client.downloadBlock(hash, to: fd) }
                } else {
                    try client.download(content: manifest.content, to: fd)
                }
            }
        }
        let pki = try TestCertificates(in: o.dir + "/pki")
        let tlsOptions = ["--tls-cert", pki.server.certificate, "--tls-key", pki.server.key]
        let configurations: [(String, [String], Timed)] = [
            ("client (tus PATCH \(o.chunkMiB) MiB, checksum)", [], Timed(ourUpload(checksum: true))),
            ("client, no Upload-Checksum", [], Timed(ourUpload(checksum: false))),
            ("curl -T (one PUT per block)", [], Timed(curlUpload)),
            ("client, server --sync-every-patch", ["--sync-every-patch"], Timed(ourUpload(checksum: true))),
            ("client over TLS (tus PATCH \(o.chunkMiB) MiB, checksum)", tlsOptions, Timed(ourUpload(checksum: true, caFile: pki.ca))),
            ("download, GET /v1/contents", [], ourDownload(blocks: false)),
            ("download, GET /v1/blocks per block", [], ourDownload(blocks: true)),
            ("download over TLS, GET /v1/contents", tlsOptions, ourDownload(blocks: false, caFile: pki.ca)),
            ("download over TLS, GET /v1/blocks per block", tlsOptions, ourDownload(blocks: true, caFile: pki.ca)),
        ]
        if o.tlsOnly { return try compareTLS(o, plain: configurations[0], tls: configurations[4]) }
        var runs = [[Figures]](repeating: [], count: configurations.count)
        for round in 1...o.repeats {
            print("round \(round) of \(o.repeats)")
            for (i, c) in configurations.enumerated() { runs[i].append(try measure(o, label: c.0, extra: c.1, c.2)) }
        }
        let medians = runs.map { $0.sorted { $0.wall < $1.wall }[$0.count / 2] }
        let (ours, unchecked, curl, synced, tls) = (medians[0], medians[1], medians[2], medians[3], medians[4])
        let downloads = Array(medians[5...])
        try? FileManager.default.removeItem(atPath: file)
        try? FileManager.default.removeItem(atPath: o.dir + "/blocks")
        if o.ratesOnly {
            print("")
            print("Medians of \(o.repeats) rounds:")
            print("| run | MB/s | wall s | client CPU s | server CPU s | server peak RSS MiB |")
            print("|---|---:|---:|---:|---:|---:|")
            for r in [ours, unchecked, curl, synced, tls] + downloads { print(r.row) }
            return
        }

        // 3. RSS during a larger upload.
        let big = o.dir + "/big"
        let bigManifest = try makeFile(big, mib: o.rssSizeMiB)
        let rss = try measure(o, label: "client, \(o.rssSizeMiB) MiB (RSS run)", extra: [], Timed { server, token in
            let client = WorkspaceClient(baseURL: server.base, token: token)
            let fd = open(big, O_RDONLY)
            defer { close(fd) }
            try client.uploadFile(fd: fd, size: bigManifest.size, manifest: bigManifest, chunkSize: o.chunkMiB << 20)
            try record(client, bigManifest)
        })
        try? FileManager.default.removeItem(atPath: big)

        // 4. Dedup check of 10,000 content hashes against 100,000 stored contents.
        let dedup = try dedupCheck(o)

        print("")
        print("Medians of \(o.repeats) rounds (the RSS run once):")
        print("| run | MB/s | wall s | client CPU s | server CPU s | server peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in [ours, unchecked, curl, synced, tls] + downloads + [rss] { print(r.row) }
        print("")
        print(String(format: "client throughput vs curl -T: %.0f%%", 100 * ours.mbps / curl.mbps))
        print(String(format: "fdatasync per PATCH costs %.0f%% of throughput", 100 * (1 - synced.mbps / ours.mbps)))
        print(String(format: "TLS vs plain HTTP: %.2f× throughput (upload), %.2f× (GET /v1/contents), %.2f× (GET /v1/blocks)",
                     tls.mbps / ours.mbps, downloads[2].mbps / downloads[0].mbps, downloads[3].mbps / downloads[1].mbps))
        print(String(format: "server RSS: idle %.1f MiB; peak %.1f MiB during %lld MiB, %.1f MiB during %lld MiB",
                     ours.idleRSS, ours.peakRSS, o.sizeMiB, rss.peakRSS, o.rssSizeMiB))
        print(String(format: "dedup check of 10,000 hashes (100,000 stored, half present): median %.1f ms, max %.1f ms over %d calls",
                     dedup.median, dedup.max, dedup.count))
        LockoutBenchmark.report(try LockoutBenchmark.run(o))
        AccessLogBenchmark.report(try AccessLogBenchmark.run(o))
        LongPollBenchmark.report(try LongPollBenchmark.run(o, polls: o.longPolls))
        try PackBenchmark.run(o)
    }

    struct Figures {
        let label: String
        let bytes: Int64
        let wall: Double
        let clientCPU: Double
        let serverCPU: Double
        let idleRSS: Double
        let peakRSS: Double
        var mbps: Double { Double(bytes) / 1e6 / wall }
        var row: String {
            String(format: "| %@ | %.0f | %.2f | %.2f | %.2f | %.1f |", label, mbps, wall, clientCPU, serverCPU, peakRSS)
        }
    }

    /// What a row times: `body`, after `prepare` (outside the clock); `bytes` moved (nil:
    /// the bytes the server stores, for uploads).
    struct Timed {
        var prepare: ((RunningServer, String) throws -> Void)?
        var bytes: Int64?
        var body: (RunningServer, String) throws -> Void
        init(prepare: ((RunningServer, String) throws -> Void)? = nil, bytes: Int64? = nil, _ body: @escaping (RunningServer, String) throws -> Void) {
            self.prepare = prepare
            self.bytes = bytes
            self.body = body
        }
    }

    /// Starts a fresh `vdrive serve`, runs `timed` against it, and measures. With `keep`,
    /// the server's data folder is that folder and stays (the caller removes it later).
    static func measure(_ o: Options, label: String, extra: [String], _ timed: Timed, keep: String? = nil) throws -> Figures {
        let data = keep ?? o.dir + "/data-" + String(label.unicodeScalars.filter { CharacterSet.alphanumerics.contains($0) }.map(Character.init).prefix(12))
        try? FileManager.default.removeItem(atPath: data)
        let token = try DeviceRegistry(dataDirectory: data).add("bench")
        sync()
        let server = try RunningServer(vdrive: o.vdrive, data: data, extra: extra)
        defer {
            server.stop()
            if keep == nil { try? FileManager.default.removeItem(atPath: data) }
        }
        try timed.prepare?(server, token)
        let sampler = RSSSampler(pid: server.pid)
        let idle = Double(sampler.sample()) / 1024
        sampler.start()
        let serverBefore = server.cpuSeconds()
        let selfBefore = Bench.ownCPUSeconds(), childBefore = Bench.childrenCPUSeconds()
        let start = Bench.now()
        try timed.body(server, token)
        let wall = Bench.now() - start
        let clientCPU = (Bench.ownCPUSeconds() - selfBefore) + (Bench.childrenCPUSeconds() - childBefore)
        let serverCPU = server.cpuSeconds() - serverBefore
        let peak = Double(sampler.stop()) / 1024
        let bytes = timed.bytes ?? blobBytes(data + "/blobs")
        let f = Figures(label: label, bytes: bytes, wall: wall, clientCPU: clientCPU, serverCPU: serverCPU, idleRSS: idle, peakRSS: peak)
        print(f.row)
        return f
    }

    /// The bytes of the blocks a folder store holds: its block files, and the blocks in its
    /// pack files (by their index).
    static func blobBytes(_ root: String) -> Int64 {
        var total: Int64 = 0
        if let index = try? Database(path: root + "/packs/index.db", options: .init(readOnly: true, create: false)) {
            total += (try? index.queryOne("SELECT COALESCE(SUM(length), 0) FROM packed") { $0.int64(0) }) ?? 0
        }
        for folder in (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [] where folder.count == 2 {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: root + "/" + folder)) ?? [] {
                var st = stat()
                if stat(root + "/" + folder + "/" + name, &st) == 0 { total += Int64(st.st_size) }
            }
        }
        return total
    }

    static func dedupCheck(_ o: Options) throws -> (median: Double, max: Double, count: Int) {
        let data = o.dir + "/data-dedup"
        let token = try DeviceRegistry(dataDirectory: data).add("bench")
        // Seed 100,000 content rows (rows only: the dedup check reads metadata, not files).
        let db = try Database(path: data + "/server.db")
        try db.transaction {
            for i in 0..<100_000 {
                try db.run("INSERT INTO contents(hash, size, blocks, created_at) VALUES (?, 0, '[]', 0)", SHA256Hasher.digest("blob \(i)").hex)
            }
        }
        let server = try RunningServer(vdrive: o.vdrive, data: data, extra: [])
        defer { server.stop(); try? FileManager.default.removeItem(atPath: data) }
        let client = WorkspaceClient(baseURL: server.base, token: token)
        // Half present, half not.
        let asked = (0..<10_000).map { SHA256Hasher.digest($0 % 2 == 0 ? "blob \($0 * 7)" : "absent \($0)") }
        var times: [Double] = []
        for _ in 0..<11 {
            let t = Bench.now()
            let present = try client.presentContents(asked)
            times.append((Bench.now() - t) * 1000)
            guard present.count == 5_000 else { throw BenchError("dedup answered \(present.count) present, expected 5000") }
        }
        times.removeFirst()  // the first call also opens the connection
        times.sort()
        return (times[times.count / 2], times.last!, times.count)
    }

    /// Records the uploaded file and checks that the server now has its content.
    static func record(_ client: WorkspaceClient, _ manifest: BlockManifest) throws {
        try client.recordFile(FileRecord(path: "bench/payload", hash: manifest.content.hex, size: manifest.size, blocks: manifest.blocks.map(\.hex),
                                         captureDate: nil, mtime: 0, deviceSequence: 1))
        guard try client.presentContents([manifest.content]) == [manifest.content] else { throw BenchError("content not present after upload") }
    }

    /// Copies each block of `file` into its own file (for curl -T, which sends whole files).
    static func splitIntoBlocks(_ file: String, manifest: BlockManifest, folder: String) throws -> [(path: String, hash: SHA256Digest)] {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let fd = open(file, O_RDONLY)
        guard fd >= 0 else { throw BenchError("cannot open \(file)") }
        defer { close(fd) }
        var out: [(String, SHA256Digest)] = []
        for (i, hash) in manifest.blocks.enumerated() {
            let path = folder + "/" + hash.hex
            let length = Blocks.length(ofBlock: i, fileSize: manifest.size)
            var bytes = [UInt8](repeating: 0, count: length)
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(Int64(i) * Int64(Blocks.size))) }
            guard n == length else { throw BenchError("short read of \(file)") }
            writeAll(path, bytes)
            out.append((path, hash))
        }
        return out
    }

    static func writeAll(_ path: String, _ bytes: [UInt8]) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        defer { close(fd) }
        bytes.withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                let n = write(fd, raw.baseAddress! + done, raw.count - done)
                if n <= 0 { return }
                done += n
            }
        }
    }

    /// A file of pseudo-random bytes (xorshift), written in 8 MiB pieces, hashed as written.
    static func makeFile(_ path: String, mib: Int64) throws -> BlockManifest {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw BenchError("cannot create \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let hasher = ContentHasher()
        var state: UInt64 = 0x9E3779B97F4A7C15 ^ UInt64(mib)
        let words = 1 << 20
        var block = [UInt64](repeating: 0, count: words)
        for _ in 0..<mib / 8 {
            for j in 0..<words {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                block[j] = state
            }
            try block.withUnsafeBytes { raw in
                hasher.update(raw)
                var done = 0
                while done < raw.count {
                    let n = write(fd, raw.baseAddress! + done, raw.count - done)
                    if n <= 0 { throw BenchError("writing \(path): \(String(cString: strerror(errno)))") }
                    done += n
                }
            }
        }
        let (content, blocks) = hasher.finish()
        return BlockManifest(content: content, size: mib << 20, blocks: blocks)
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A `vdrive serve` child process on a free loopback port.
final class RunningServer {
    let process = Process()
    let base: String
    var pid: Int32 { process.processIdentifier }

    /// `errors`: a file for the server's stderr (its access log); else the bench's stderr.
    /// `listen`: a fixed address (a restart on the same port), else a free port.
    init(vdrive: String, data: String, extra: [String], errors: String? = nil, listen: String = "127.0.0.1:0") throws {
        process.executableURL = URL(fileURLWithPath: vdrive)
        process.arguments = ["serve", "--data", data, "--listen", listen] + extra
        let out = Pipe()
        process.standardOutput = out
        if let errors {
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process.standardError = FileHandle(forWritingAtPath: errors)
        }
        try process.run()
        var line = [UInt8]()
        while true {
            let b = out.fileHandleForReading.readData(ofLength: 1)
            if b.isEmpty || b.first == 10 { break }
            line.append(b.first!)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let r = text.range(of: "https://") ?? text.range(of: "http://") else {
            process.terminate()
            throw BenchError("vdrive serve did not start: '\(text)'")
        }
        base = String(text[r.lowerBound...].prefix { $0 != " " })
    }

    func cpuSeconds() -> Double { Bench.cpuSeconds(pid: pid) }

    func stop() {
        if process.isRunning { kill(pid, SIGTERM) }
        process.waitUntilExit()
    }
}

/// Samples a process's VmRSS (KiB) on a background thread; `stop()` returns the peak.
final class RSSSampler: @unchecked Sendable { // `peak` and `running` are guarded by `lock`
    let pid: Int32
    private let lock = NSLock()
    private var peak = 0
    private var running = false
    private var done = false

    init(pid: Int32) { self.pid = pid }

    func sample() -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
        }
        return 0
    }

    func start() {
        lock.withLock { running = true }
        Thread {
            while self.lock.withLock({ self.running }) {
                let kib = self.sample()
                self.lock.withLock { self.peak = max(self.peak, kib) }
                usleep(20_000)
            }
            self.lock.withLock { self.done = true }
        }.start()
    }

    func stop() -> Int {
        lock.withLock { running = false }
        while !lock.withLock({ done }) { usleep(1_000) }
        return lock.withLock { max(peak, sample()) }
    }
}
