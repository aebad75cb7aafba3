import Client
import Crypto
import Foundation
import Protocol
import Server
import Synchronization

/// `vdrive-bench restore`: `vdrive restore` against `curl` downloading the same
/// contents from the same loopback `vdrive serve`, in one run:
///
///  1. photos: N photos of 2–8 MB (sizes spread evenly, random bytes) backed up by
///     device "phone", restored by a new device;
///  2. video: one file of `--video-mib` backed up by device "camera";
///  3. RSS: `--records` small files (1,000 distinct 4 KiB contents, each recorded
///     under many paths) restored by `vdrive restore`, then by `cp -a` from a mount's
///     `Backups/`; the peak RSS of the restore, then of the mount, sampled every 20 ms.
///
/// The curl peer is one process with one `GET /v1/contents/<hash>` per file into its
/// place (`--create-dirs`), on one kept-alive connection, then with `--parallel
/// --parallel-max T`. `vdrive restore` also writes every file to disk (fdatasync)
/// before renaming it, which curl does not: each row also shows the `sync` that puts
/// curl's bytes on disk, and a row runs `sha256sum` over curl's files after it (what
/// a script that verifies pays; `vdrive restore` hashes every byte as it arrives).
/// Wall and CPU (user + system of the child) per row; every
/// destination is deleted after its row, so the disk holds the server's copy and one
/// restore at a time. With `KEEP=1` in the environment DIR stays (the server's data
/// and the token files), for profiling a restore by hand against `vdrive serve --data DIR/server`.
enum RestoreBenchmark {
    static let usage = "       vdrive-bench restore [--sections photos,video,rss] [--photos N] [--video-mib N] [--records N] [--transfers 1,4] [--rounds N] [--dir DIR] [--vdrive PATH] [--baseline-vdrive PATH]"

    struct Options {
        var sections: Set<String> = ["photos", "video", "rss"]
        var photos = 1000
        var videoMiB = 2048
        var records = 100_000
        var transfers = [1, 4]
        var rounds = 1
        var dir = "/tmp/vdrive-bench-restore"
        var vdrive = Bench.sibling("vdrive")
        /// Another build of vdrive run beside this one (its RSS over the same records).
        var baseline: String?
        var baselineSeconds = 90.0
    }

    static func run(_ arguments: [String]) throws {
        var o = Options()
        try Bench.parseOptions(arguments, values: [
            "--sections": { o.sections = Set($0.split(separator: ",").map(String.init)) },
            "--photos": { o.photos = try Bench.count($0) },
            "--video-mib": { o.videoMiB = try Bench.count($0) },
            "--records": { o.records = try Bench.count($0) },
            "--transfers": { o.transfers = $0.split(separator: ",").compactMap { Int($0) } },
            "--rounds": { o.rounds = try Bench.count($0) },
            "--dir": { o.dir = $0 },
            "--vdrive": { o.vdrive = $0 },
            "--baseline-vdrive": { o.baseline = $0 },
        ])
        try Bench.sh("rm -rf \(o.dir) && mkdir -p \(o.dir)")
        defer { if ProcessInfo.processInfo.environment["KEEP"] == nil { _ = try? Bench.sh("rm -rf \(o.dir)") } }
        let data = o.dir + "/server"
        let registry = try DeviceRegistry(dataDirectory: data)
        var tokens: [String: String] = [:]
        for name in ["phone", "camera", "many", "restorer"] { tokens[name] = try registry.add(name) }
        try tokens["restorer"]!.write(toFile: o.dir + "/restorer.token", atomically: true, encoding: .utf8)
        try "Authorization: Bearer \(tokens["restorer"]!)\n".write(toFile: o.dir + "/curl.header", atomically: true, encoding: .utf8)
        let server = try RunningServer(vdrive: o.vdrive, data: data, extra: [])
        defer { server.stop() }
        say("vdrive-bench restore: \(o.vdrive), server \(server.base), data in \(o.dir), transfers \(o.transfers), \(o.rounds) round(s)")

        if o.sections.contains("photos") {
            let client = WorkspaceClient(baseURL: server.base, token: tokens["phone"]!)
            let bytes = try backUp(client, count: o.photos, dir: o.dir) { i in (2 << 20) + (i * 6 << 20) / max(o.photos - 1, 1) }
            say("photos: \(o.photos) files, \(Bench.f(Double(bytes) / 1e9)) GB backed up")
            try compare("photos", device: "phone", bytes: bytes, server: server, o: o)
        }
        if o.sections.contains("video") {
            let client = WorkspaceClient(baseURL: server.base, token: tokens["camera"]!)
            let bytes = try backUp(client, count: 1, dir: o.dir, name: { _ in "VID_0001.mov" }) { _ in o.videoMiB << 20 }
            say("video: one file, \(o.videoMiB) MiB backed up")
            try compare("video", device: "camera", bytes: bytes, server: server, o: o)
        }
        if o.sections.contains("rss") {
            try memory(server: server, token: tokens["many"]!, o: o)
        }
    }

    /// Backs up `count` files of `size(i)` random bytes as `Camera Roll/<name(i)>`,
    /// each written to a scratch file, uploaded, recorded, deleted. Returns the bytes.
    static func backUp(_ client: WorkspaceClient, count: Int, dir: String, name: (Int) -> String = { "IMG_\(10000 + $0).jpg" },
                       size: (Int) -> Int) throws -> Int64 {
        let scratch = dir + "/scratch"
        var total: Int64 = 0
        for i in 0..<count {
            let n = size(i)
            try writeRandom(scratch, size: n, seed: UInt64(i + 1) &* 0x9E37_79B9)
            let fd = open(scratch, O_RDONLY)
            defer { close(fd); unlink(scratch) }
            let manifest = try client.uploadFile(fd: fd, size: Int64(n))
            try client.recordFile(FileRecord(path: "Camera Roll/" + name(i), hash: manifest.content.hex, size: Int64(n),
                                             blocks: manifest.blocks.map(\.hex), captureDate: 1_500_000_000 + Int64(i) * 3600,
                                             mtime: 1_600_000_000, deviceSequence: Int64(i + 1)))
            total += Int64(n)
        }
        return total
    }

    /// `size` pseudo-random bytes (xorshift) in 8 MiB pieces.
    static func writeRandom(_ path: String, size: Int, seed: UInt64) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw Bench.Failure(description: "cannot write \(path)") }
        defer { close(fd) }
        var state = seed | 1
        let piece = 8 << 20
        var buffer = [UInt64](repeating: 0, count: piece / 8)
        var written = 0
        while written < size {
            for k in buffer.indices { state ^= state << 13; state ^= state >> 7; state ^= state << 17; buffer[k] = state }
            let n = min(piece, size - written)
            guard buffer.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, n) }) == n else { throw Bench.Failure(description: "short write to \(path)") }
            written += n
        }
    }

    /// One row: a command's wall time, the CPU of its process tree, then a `sync`'s time;
    /// and the whole machine's CPU from the start to the end of that `sync` (curl leaves
    /// writing its files back to kernel threads; `vdrive restore` does it itself).
    struct Row { var label: String; var wall: Double; var cpu: Double; var sync: Double; var serverCPU: Double; var machineCPU: Double }

    static func timed(_ label: String, server: RunningServer, _ command: String, check: () throws -> Void) throws -> Row {
        let cpuBefore = Bench.childrenCPUSeconds(), serverBefore = server.cpuSeconds(), machineBefore = Bench.machineBusySeconds()
        let outcome = TimedCommand.run(command, timeout: 3600, log: "/dev/stderr")
        let cpu = Bench.childrenCPUSeconds() - cpuBefore
        guard outcome.succeeded, let wall = outcome.seconds else { throw Bench.Failure(description: "\(label): \(outcome.text { "\($0)" }): \(command)") }
        let serverCPU = server.cpuSeconds() - serverBefore
        let sync = Bench.time { Glibc.sync() }
        let machineCPU = Bench.machineBusySeconds() - machineBefore
        try check()
        return Row(label: label, wall: wall, cpu: cpu, sync: sync, serverCPU: serverCPU, machineCPU: machineCPU)
    }

    /// Restores `device` with curl (sequential, then parallel) and with `vdrive restore`
    /// (each transfer count), `rounds` times, and prints the rows with ratios to curl.
    static func compare(_ name: String, device: String, bytes: Int64, server: RunningServer, o: Options) throws {
        let lister = WorkspaceClient(baseURL: server.base, token: try String(contentsOfFile: o.dir + "/restorer.token", encoding: .utf8))
        let records = try lister.listFiles(device: device, prefix: "")
        let dest = o.dir + "/dest"
        func curlConfig(parallel: Int?) throws -> String {
            var cfg = "silent\nshow-error\n"
            if let parallel { cfg += "parallel\nparallel-max = \(parallel)\n" }
            for (i, r) in records.enumerated() {
                // `next` resets the options: each transfer carries its own.
                if i > 0 { cfg += "next\n" }
                cfg += "fail\ncreate-dirs\nheader = \"@\(o.dir)/curl.header\"\nurl = \"\(server.base)\(API.contentPrefix)\(r.hash)\"\noutput = \"\(dest)/\(r.path)\"\n"
            }
            let path = o.dir + "/curl-\(parallel ?? 1).conf"
            try cfg.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        let checkAll = {
            let got = Int(try Bench.sh("find \(dest) -type f -not -name '.*' | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            let size = try Bench.sh("find \(dest) -type f -not -name '.*' -printf '%s\\n'").split(separator: "\n").reduce(Int64(0)) { $0 + (Int64($1) ?? 0) }
            guard got == records.count, size == bytes else {
                throw Bench.Failure(description: "\(got) files of \(size) bytes in \(dest), expected \(records.count) of \(bytes)")
            }
            try Bench.sh("rm -rf \(dest)")
        }
        var rows: [Row] = []
        let parallel = o.transfers.max() ?? 4
        for _ in 0..<o.rounds {
            rows.append(try timed("curl, one connection", server: server, "curl -K \(try curlConfig(parallel: nil))", check: checkAll))
            rows.append(try timed("curl --parallel-max \(parallel)", server: server, "curl -K \(try curlConfig(parallel: parallel))", check: checkAll))
            // What a script that checks what it got pays on top (sha256sum reads the files back).
            rows.append(try timed("curl, then sha256sum", server: server,
                                  "curl -K \(try curlConfig(parallel: nil)) && find \(dest) -type f -print0 | xargs -0 sha256sum >/dev/null", check: checkAll))
            for t in o.transfers {
                rows.append(try timed("vdrive restore --transfers \(t)", server: server,
                                      "\(o.vdrive) restore \(device) \(dest) --server \(server.base) --token-file \(o.dir)/restorer.token --now --transfers \(t) >/dev/null",
                                      check: checkAll))
            }
        }
        print("\n\(name): \(records.count) file(s), \(Bench.f(Double(bytes) / 1e9)) GB, median of \(o.rounds) round(s); ratios against curl with the same parallelism")
        var table: [[String]] = []
        let labels = rows.prefix(3 + o.transfers.count).map(\.label)
        func median(_ label: String, _ key: (Row) -> Double) -> Double {
            let v = rows.filter { $0.label == label }.map(key).sorted()
            return v[v.count / 2]
        }
        for label in labels {
            let wall = median(label, \.wall), cpu = median(label, \.cpu), sync = median(label, \.sync), machine = median(label, \.machineCPU)
            let peer = label.hasSuffix("--transfers 1") ? labels[0] : labels[1]
            let isVdrive = label.hasPrefix("vdrive")
            table.append([label, Bench.f(wall), Bench.f(Double(bytes) / wall / 1e6, 0), Bench.f(cpu), Bench.f(sync), Bench.f(wall + sync),
                          Bench.f(median(label, \.serverCPU)),
                          isVdrive ? Bench.f(wall / median(peer, \.wall)) + "× / " + Bench.f((wall + sync) / (median(peer, \.wall) + median(peer, \.sync))) + "×" : "",
                          isVdrive ? Bench.f(cpu / median(peer, \.cpu)) + "×" : "",
                          Bench.f(machine), isVdrive ? Bench.f(machine / median(peer, \.machineCPU)) + "×" : ""])
        }
        print(Bench.table(["run", "wall s", "MB/s", "CPU s", "then sync s", "wall + sync s", "server CPU s", "wall vs curl (+sync)", "CPU vs curl",
                           "machine CPU s to sync's end", "machine CPU vs curl"], table))
    }

    /// The same records restored by `cp -a` from a mount's `Backups/` folder (a mount of
    /// its own, device "restorer"): the mount's peak RSS while it lists them and serves
    /// the copy, each file fetched on demand.
    static func copyThroughMount(server: RunningServer, o: Options) throws -> [String] {
        let drive = o.dir + "/drive", dest = o.dir + "/dest"
        try Bench.sh("mkdir -p \(drive)/mnt")
        let mount = try BackupBenchmark.Mount(vdrive: o.vdrive, dir: drive, server: server.base, token: o.dir + "/restorer.token")
        defer { mount.stop() }
        let sampler = RSSSampler(pid: mount.pid)
        sampler.start()
        let folder = drive + "/mnt/Backups/many"
        let t0 = Bench.now(), cpu0 = Bench.cpuSeconds(pid: mount.pid)
        var listed = 0
        while listed < o.records {
            guard Bench.now() - t0 < 900 else { throw Bench.Failure(description: "the mount listed \(listed) of \(o.records) records in 900 s") }
            sleep(2)
            listed = Int(try Bench.sh("find '\(folder)' -type f 2>/dev/null | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
        let listing = Bench.now() - t0
        say("rss: the mount lists all \(listed) records after \(Bench.f(listing)) s (RSS \(Bench.f(Double(sampler.sample()) / 1024, 1)) MB: \(residentParts(mount.pid)))")
        let t1 = Bench.now()
        try Bench.sh("cp -a '\(folder)' '\(dest)'")
        let wall = Bench.now() - t1, cpu = Bench.cpuSeconds(pid: mount.pid) - cpu0
        let peak = sampler.stop()
        say("rss: after the copy, \(residentParts(mount.pid))")
        let files = Int(try Bench.sh("find \(dest) -type f | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        try Bench.sh("rm -rf \(dest)")
        return ["cp -a from a mount's Backups/ (the mount's RSS)", "\(files)", Bench.f(Double(peak) / 1024, 1), Bench.f(wall),
                Bench.f(cpu), "listed in \(Bench.f(listing)) s first; CPU: the mount's, listing and copy"]
    }

    /// A process's resident memory by kind (anonymous: its heap and stacks; file: mapped
    /// files' pages; shmem: shared memory such as SQLite's WAL index).
    static func residentParts(_ pid: Int32) -> String {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return "-" }
        return status.split(separator: "\n").filter { $0.hasPrefix("RssAnon") || $0.hasPrefix("RssFile") || $0.hasPrefix("RssShmem") }
            .map { $0.split(separator: " ", omittingEmptySubsequences: true).prefix(2).joined(separator: " ") }.joined(separator: ", ")
    }

    /// `records` small files restored; the restore's peak RSS (and a baseline build's).
    static func memory(server: RunningServer, token: String, o: Options) throws {
        let client = WorkspaceClient(baseURL: server.base, token: token)
        let distinct = min(1000, o.records)
        var manifests: [BlockManifest] = []
        for i in 0..<distinct {
            let scratch = o.dir + "/scratch"
            try writeRandom(scratch, size: 4096, seed: UInt64(50_000 + i))
            let fd = open(scratch, O_RDONLY)
            manifests.append(try client.uploadFile(fd: fd, size: 4096))
            close(fd)
        }
        let contents = manifests
        let start = Bench.now()
        // Recorded from 4 threads on their own connections (HTTPConnection pools them).
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 4) { part in
            for i in stride(from: part, to: o.records, by: 4) {
                let m = contents[i % distinct]
                let record = FileRecord(path: "Camera Roll/\(i / 1000)/IMG_\(i).jpg", hash: m.content.hex, size: 4096, blocks: m.blocks.map(\.hex),
                                        captureDate: 1_500_000_000 + Int64(i), mtime: 1_600_000_000, deviceSequence: Int64(i + 1))
                if (try? client.recordFile(record)) == nil { failures.withLock { $0 += 1 } }
            }
        }
        guard failures.withLock({ $0 }) == 0 else { throw Bench.Failure(description: "\(failures.withLock { $0 }) records refused") }
        say("rss: \(o.records) records of 4 KiB made in \(Bench.f(Bench.now() - start)) s")
        var table: [[String]] = []
        for (label, vdrive) in [("vdrive restore", o.vdrive)] + (o.baseline.map { [("baseline (\($0))", $0)] } ?? []) {
            let dest = o.dir + "/dest"
            let log = o.dir + "/restore.log"
            let t0 = Bench.now(), cpu0 = Bench.childrenCPUSeconds()
            // The baseline build may predate --now (and holds nothing then).
            let now = vdrive == o.vdrive ? ["--now"] : []
            let pid = try TimedCommand.spawn([vdrive, "restore", "many", dest, "--server", server.base, "--token-file", o.dir + "/restorer.token"] + now, output: log)
            let sampler = RSSSampler(pid: pid)
            sampler.start()
            // The baseline (one file at a time) would take many minutes: its peak comes
            // with the listing, so it is stopped after `baselineSeconds`.
            let limit = vdrive == o.vdrive ? 3600 : o.baselineSeconds
            let finished = TimedCommand.reap(pid, timeout: limit)
            if !finished { kill(pid, SIGKILL); _ = TimedCommand.reap(pid, timeout: 30) }
            let peak = sampler.stop()
            let wall = Bench.now() - t0, cpu = Bench.childrenCPUSeconds() - cpu0
            let summary = finished ? (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").last.map(String.init) ?? ""
                : "stopped after \(Int(limit)) s"
            let files = Int(try Bench.sh("find \(dest) -type f -not -name '.*' | wc -l").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            table.append([label, "\(files)", Bench.f(Double(peak) / 1024, 1), Bench.f(wall), Bench.f(cpu), summary])
            try Bench.sh("rm -rf \(dest)")
        }
        table.append(try copyThroughMount(server: server, o: o))
        print("\nrss: restore of \(o.records) records of 4 KiB (peak RSS sampled every 20 ms)")
        print(Bench.table(["run", "files restored", "peak RSS MB", "wall s", "CPU s", "summary"], table))
    }
}
