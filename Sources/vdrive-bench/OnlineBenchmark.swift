import Foundation
import Client

/// `vdrive-bench online [--dir DIR] [--first-gib N] [--seq-gib N] [--rounds N]`
///
/// Reading online-only content: first byte and cold sequential read, through a real mount and a real `vdrive serve` on
/// loopback. Two videos are written into the Camera Roll, backed up, then made
/// online-only (optimize storage, a 1 KiB cache bound, raised to 100 GiB while
/// measuring); before every measurement they are online-only again and the page
/// cache is dropped.
///
/// - First byte: `head -c 1` of the `--first-gib` file (2) through the mount, beside
///   `head -c 1` of a local file (the cost of starting `head`). Target: at most 50 ms.
/// - Cold sequential read of the `--seq-gib` file (1): `cat FILE > /dev/null` through
///   the mount (which stores what it fetches) beside `curl -o FILE` of the same content
///   from the server (`GET /v1/contents/<hash>`, one connection, a file on the same disk),
///   and `curl -o /dev/null` for reference. Target: at least 0.8x curl's throughput.
enum OnlineBenchmark {
    static let usage = "       vdrive-bench online [--first-gib N] [--seq-gib N] [--rounds N] [--dir DIR] [--perf FILE]"

    static func run(_ args: [String]) throws {
        var dir = "/var/tmp/vdrive-bench-online", firstGiB = 2, seqGiB = 1, rounds = 3
        var perf: String?
        try Bench.parseOptions(args, values: [
            "--perf": { perf = $0 },
            "--dir": { dir = $0 },
            "--first-gib": { firstGiB = try Bench.count($0) },
            "--seq-gib": { seqGiB = try Bench.count($0) },
            "--rounds": { rounds = try Bench.count($0) },
        ])
        let vdrive = Bench.sibling("vdrive")
        _ = try? Bench.sh("fusermount3 -u -z \(dir)/drive/mnt 2>/dev/null; true")
        try Bench.sh("rm -rf \(dir) && mkdir -p \(dir)/drive/mnt")
        // Gone at the end (3 GiB of videos and their copies), after the mount and server stop;
        // `KEEP=1` keeps it, as for `vdrive-bench restore`.
        defer { if ProcessInfo.processInfo.environment["KEEP"] == nil { _ = try? Bench.sh("rm -rf \(dir)") } }
        setenv("VDRIVE_CACHE_CHECK_SECONDS", "1", 1)   // the mount applies the bound every second

        let server = try BackupBenchmark.startServer(vdrive, data: "\(dir)/server", tokenFile: "\(dir)/token")
        defer { server.stop() }
        let mount = try BackupBenchmark.Mount(vdrive: vdrive, dir: "\(dir)/drive", server: server.base, token: "\(dir)/token")
        defer { mount.stop() }
        let roll = "\(dir)/drive/mnt/Camera Roll"
        let first = "\(roll)/VID_first.mov", sequential = "\(roll)/VID_seq.mov"
        print("online: writing \(firstGiB) GiB and \(seqGiB) GiB videos into the Camera Roll and backing them up ...")
        try Bench.sh("head -c \(firstGiB << 30) /dev/urandom > '\(first)' && head -c \(seqGiB << 30) /dev/urandom > '\(sequential)'")
        try Bench.sh("head -c 1048576 /dev/urandom > \(dir)/local.bin")
        try mount.waitUntilBackedUp(done: 2, seconds: 1800)
        try mount.setting("optimize-storage", "on")
        let token = try String(contentsOfFile: "\(dir)/token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let hash = try WorkspaceClient(baseURL: server.base, token: token).listFiles(prefix: "Camera Roll/VID_seq.mov").first?.hash else {
            throw Bench.Failure(description: "the server has no record of VID_seq.mov")
        }

        var firstByte: [Double] = [], firstRead: [Double] = [], spawn: [Double] = []
        var driveRate: [Double] = [], curlRate: [Double] = [], curlNullRate: [Double] = []
        // CPU seconds per GiB of the cold sequential read: the reader (cat or curl), the
        // mount, the server. On 2 cores a read that costs more CPU is slower by as much.
        var driveCPU: [(reader: Double, mount: Double, server: Double)] = [], curlCPU: [(reader: Double, server: Double)] = []
        var mountPeak: [Double] = []
        func cpu(_ body: () throws -> Void) rethrows -> (reader: Double, mount: Double, server: Double) {
            let r0 = Bench.childrenCPUSeconds(), m0 = Bench.cpuSeconds(pid: mount.pid), s0 = Bench.cpuSeconds(pid: server.pid)
            try body()
            return (Bench.childrenCPUSeconds() - r0, Bench.cpuSeconds(pid: mount.pid) - m0, Bench.cpuSeconds(pid: server.pid) - s0)
        }
        let bytes = Double(seqGiB << 30)
        let curl = "curl -sS -f -H 'Authorization: Bearer \(token)' \(server.base)/v1/contents/\(hash)"
        for r in 1...rounds {
            try waitUntilOnlineOnly(vdrive: vdrive, mount: mount)
            Bench.dropCaches()
            spawn.append(try Bench.time { try TimedCommand.runDirect(["head", "-c", "1", "\(dir)/local.bin"]) })
            firstByte.append(try Bench.time { try TimedCommand.runDirect(["head", "-c", "1", first]) })
            try waitUntilOnlineOnly(vdrive: vdrive, mount: mount)
            Bench.dropCaches()
            firstRead.append(try Bench.time { try readOneByte(first) })
            Bench.dropCaches()
            var curlSeconds = 0.0
            let c = try cpu { curlSeconds = try Bench.time { try Bench.sh("\(curl) -o \(dir)/curl.out") } }
            curlRate.append(bytes / curlSeconds)
            curlCPU.append((c.reader / Double(seqGiB), c.server / Double(seqGiB)))
            try Bench.sh("rm -f \(dir)/curl.out")
            Bench.dropCaches()
            curlNullRate.append(bytes / (try Bench.time { try Bench.sh("\(curl) -o /dev/null") }))
            try waitUntilOnlineOnly(vdrive: vdrive, mount: mount)
            Bench.dropCaches()
            var catSeconds = 0.0
            try? "5\n".write(toFile: "/proc/\(mount.pid)/clear_refs", atomically: false, encoding: .utf8)   // resets VmHWM
            let d = try cpu { catSeconds = try Bench.time { try Bench.sh("cat '\(sequential)' > /dev/null") } }
            mountPeak.append(Bench.peakRSS(pid: mount.pid) ?? 0)
            driveRate.append(bytes / catSeconds)
            driveCPU.append((d.reader / Double(seqGiB), d.mount / Double(seqGiB), d.server / Double(seqGiB)))
            print("online round \(r): first byte: head -c 1 \(Bench.f(firstByte.last! * 1000, 1)) ms (of a local file \(Bench.f(spawn.last! * 1000, 1)) ms), "
                  + "open+read+close \(Bench.f(firstRead.last! * 1000, 1)) ms; cold sequential \(Bench.f(driveRate.last! / 1e6, 0)) MB/s vs curl -o FILE "
                  + "\(Bench.f(curlRate.last! / 1e6, 0)) MB/s (\(Bench.f(driveRate.last! / curlRate.last!))x), curl -o /dev/null \(Bench.f(curlNullRate.last! / 1e6, 0)) MB/s; "
                  + "CPU s per GiB: cat \(Bench.f(driveCPU.last!.reader)) + mount \(Bench.f(driveCPU.last!.mount)) + server \(Bench.f(driveCPU.last!.server)), "
                  + "curl \(Bench.f(curlCPU.last!.reader)) + server \(Bench.f(curlCPU.last!.server)); mount peak RSS \(Bench.f(mountPeak.last!, 0)) MB")
        }
        if let perf {
            // One more cold sequential read, with the mount under `perf record`.
            try waitUntilOnlineOnly(vdrive: vdrive, mount: mount)
            Bench.dropCaches()
            try Bench.profile(pid: mount.pid, into: perf) { try Bench.sh("cat '\(sequential)' > /dev/null") }
            print("online: profile of the mount during a cold read in \(perf).txt (by symbol) and \(perf).dso.txt (by library)")
        }
        let median = { (v: [Double]) in v.sorted()[v.count / 2] }
        print("")
        print(Bench.table(["figure (median of \(rounds))", "mount", "baseline", "ratio", "target"], [
            ["first byte of an online-only \(firstGiB) GiB file, head -c 1", "\(Bench.f(median(firstByte) * 1000, 1)) ms",
             "\(Bench.f(median(spawn) * 1000, 1)) ms (head -c 1 of a local file)", "-", "<= 50 ms"],
            ["the same, open + read 1 byte + close in the benchmark", "\(Bench.f(median(firstRead) * 1000, 1)) ms", "-", "-", "<= 50 ms"],
            ["cold sequential read of an online-only \(seqGiB) GiB file", "\(Bench.f(median(driveRate) / 1e6, 0)) MB/s (cat > /dev/null)",
             "\(Bench.f(median(curlRate) / 1e6, 0)) MB/s (curl -o FILE; -o /dev/null: \(Bench.f(median(curlNullRate) / 1e6, 0)) MB/s)",
             Bench.f(median(zip(driveRate, curlRate).map { $0 / $1 })) + "x", ">= 0.8x"],
            ["  CPU s per GiB read (reader + mount + server)",
             "\(Bench.f(median(driveCPU.map(\.reader)))) + \(Bench.f(median(driveCPU.map(\.mount)))) + \(Bench.f(median(driveCPU.map(\.server))))",
             "\(Bench.f(median(curlCPU.map(\.reader)))) + - + \(Bench.f(median(curlCPU.map(\.server))))", "-", "-"],
            ["  peak RSS of the mount during the read", "\(Bench.f(median(mountPeak), 0)) MB", "-", "-", "-"],
        ]))
    }

    /// Opens a file, reads its first byte and closes it.
    static func readOneByte(_ path: String) throws {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw Bench.Failure(description: "cannot open \(path): errno \(errno)") }
        defer { close(fd) }
        var byte: UInt8 = 0
        guard read(fd, &byte, 1) == 1 else { throw Bench.Failure(description: "cannot read \(path): errno \(errno)") }
    }

    /// Waits until no block of the drive is held locally (the bound drops what the last
    /// round fetched, partial blocks included).
    /// The bound is 1 KiB only while waiting: during a measurement it is large, so the
    /// mount does not drop blocks it is fetching (a 1 KiB bound would evict each block
    /// a second after the reader fetched it, which is no user's setting).
    static func waitUntilOnlineOnly(vdrive: String, mount: BackupBenchmark.Mount) throws {
        try mount.setting("cache-size", "1K")
        defer { try? mount.setting("cache-size", "100G"); usleep(1_500_000) }
        for _ in 0..<600 {
            let status = try Bench.sh("XDG_CONFIG_HOME=\(mount.dir)/config XDG_DATA_HOME=\(mount.dir)/data \(vdrive) status --state \(mount.dir)/state")
            let partials = (try? FileManager.default.contentsOfDirectory(atPath: mount.dir + "/state/blobs/partial")) ?? []
            if status.contains(" 0 B local · 0 B cached") && partials.isEmpty { return }
            usleep(100_000)
        }
        throw Bench.Failure(description: "the videos did not become online-only")
    }
}
