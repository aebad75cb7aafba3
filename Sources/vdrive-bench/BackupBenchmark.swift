import Foundation
import Server

/// `vdrive-bench backup [--dir DIR] [--photos N] [--photo-mb N] [--idle-seconds N] [--kill-mib N] [--rss-gib N]`
///
/// In one run, against real `vdrive serve` processes on loopback:
///  1. `cp` of N photos of 3 MB into the mounted Camera Roll until the queue is empty
///     (wall time, CPU seconds per GB of the mount process) vs `curl -T` of the same files
///     to a fresh server (PUT /v1/blocks/<hash>), one after the other: one curl process per
///     file (a shell loop), and, stricter, one curl process for all files (one connection);
///  2. bytes read from local storage per byte uploaded (the mount's rchar, less the bytes
///     the kernel handed it as writes through /dev/fuse);
///  3. bytes re-sent after a SIGKILL of the mount in the middle of a large upload
///     (the server's wchar beyond the file's size);
///  4. CPU of the idle mount over a window;
///  5. peak RSS of the mount with 100,000 catalog entries and a 4 GiB upload in flight.
enum BackupBenchmark {
    struct Options {
        var dir = "/var/tmp/vdrive-bench-backup"
        var photos = 1000, photoMB = 3, idleSeconds = 600, killMiB = 500, rssGiB = 4, entries = 100_000
        /// `cpu` (the drive against cp + curl, all processes' CPU) and
        /// `classic` (the drive against curl, bytes re-sent after a kill, idle CPU, RSS).
        var sections: Set<String> = ["cpu", "classic"]
        var cpuPhotos = 300, rounds = 3
        /// `perf record` of the mount during one extra drive run of the cpu section.
        var perf: String?
        /// Another `vdrive` build (e.g. of the commit before a change) run beside this one.
        var baselineVdrive: String?
    }

    static func run(_ args: [String]) throws {
        var o = Options()
        try Bench.parseOptions(args, values: [
            "--dir": { o.dir = $0 },
            "--photos": { o.photos = try Bench.count($0) },
            "--photo-mb": { o.photoMB = try Bench.count($0) },
            "--idle-seconds": { o.idleSeconds = try Bench.whole($0) },
            "--kill-mib": { o.killMiB = try Bench.count($0) },
            "--rss-gib": { o.rssGiB = try Bench.count($0) },
            "--entries": { o.entries = try Bench.count($0) },
            "--sections": { o.sections = Set($0.split(separator: ",").map(String.init)) },
            "--cpu-photos": { o.cpuPhotos = try Bench.count($0) },
            "--rounds": { o.rounds = try Bench.count($0) },
            "--perf": { o.perf = $0 },
            "--baseline-vdrive": { o.baselineVdrive = $0 },
        ])
        let vdrive = Bench.sibling("vdrive")
        let d = o.dir
        _ = try? Bench.sh("fusermount3 -u -z \(d)/mnt 2>/dev/null; true")
        try Bench.sh("rm -rf \(d) && mkdir -p \(d)/src \(d)/mnt \(d)/config")
        if o.sections.contains("cpu") { try cpuSection(o, vdrive: vdrive) }
        guard o.sections.contains("classic") else { return }
        print("Preparing \(o.photos) photos of \(o.photoMB) MB in \(d)/src ...")
        try Bench.sh("head -c \(o.photoMB)M /dev/urandom > \(d)/one && for i in $(seq 1 \(o.photos)); do cp \(d)/one \(d)/src/IMG_$i.jpg; printf %016d $i | dd of=\(d)/src/IMG_$i.jpg bs=1 seek=0 conv=notrunc status=none; done && rm \(d)/one")
        let totalBytes = Int64(o.photos) * Int64(o.photoMB) << 20
        let gb = Double(totalBytes) / 1e9

        // --- 1 and 2: the drive ---
        let server = try startServer(vdrive, data: "\(d)/server-a", tokenFile: "\(d)/token-a")
        defer { server.stop() }
        var mount = try Mount(vdrive: vdrive, dir: d, server: server.base, token: "\(d)/token-a")
        defer { mount.stop() }
        let cpu0 = Bench.cpuSeconds(pid: mount.pid), rchar0 = Bench.ioCounter(pid: mount.pid, "rchar")
        let serverCPU0 = server.cpuSeconds()
        let t0 = Bench.now()
        try Bench.sh("cp \(d)/src/* '\(d)/mnt/Camera Roll/'")
        let copied = Bench.now() - t0
        try mount.waitUntilBackedUp(done: o.photos)
        let driveWall = Bench.now() - t0
        let driveCPU = Bench.cpuSeconds(pid: mount.pid) - cpu0
        let driveServerCPU = server.cpuSeconds() - serverCPU0
        // Everything the mount read, less what the kernel handed it through /dev/fuse
        // (the photos cp wrote, plus about 80 bytes of request header per write).
        let readFromStorage = Bench.ioCounter(pid: mount.pid, "rchar") - rchar0 - totalBytes
        let readPerByte = Double(readFromStorage) / Double(totalBytes)

        // --- 1: curl -T of the same files to a fresh server, one after the other ---
        let server2 = try startServer(vdrive, data: "\(d)/server-b", tokenFile: "\(d)/token-b")
        defer { server2.stop() }
        let token2 = try String(contentsOfFile: "\(d)/token-b", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        var config = "silent\nshow-error\nheader = \"Authorization: Bearer \(token2)\"\n"
        try FileManager.default.createDirectory(atPath: "\(d)/names", withIntermediateDirectories: true)
        for n in 1...o.photos {
            let hash = try Bench.sh("sha256sum \(d)/src/IMG_\(n).jpg").prefix(64)
            try "IMG_\(n).jpg".write(toFile: "\(d)/names/\(hash)", atomically: false, encoding: .utf8)
            config += "upload-file = \"\(d)/src/IMG_\(n).jpg\"\nurl = \"\(server2.base)/v1/blocks/\(hash)\"\noutput = \"/dev/null\"\n"
        }
        try config.write(toFile: "\(d)/curl.conf", atomically: true, encoding: .utf8)
        let curlChildren0 = Bench.childrenCPUSeconds(), server2CPU0 = server2.cpuSeconds()
        let c0 = Bench.now()
        try Bench.sh("curl -K \(d)/curl.conf")
        let curlWall = Bench.now() - c0
        let curlCPU = Bench.childrenCPUSeconds() - curlChildren0
        let curlServerCPU = server2.cpuSeconds() - server2CPU0
        let stored = try Bench.sh("find \(d)/server-b/blobs -mindepth 2 -type f -name '????????????????????????????????????????????????????????????????' | wc -l")
        guard Int(stored.trimmingCharacters(in: .whitespacesAndNewlines)) == o.photos else {
            throw Bench.Failure(description: "curl baseline stored \(stored) blobs, expected \(o.photos)")
        }
        server2.stop()

        // The same, one curl process per file, as a shell loop would do it ("one by one").
        let server3 = try startServer(vdrive, data: "\(d)/server-c", tokenFile: "\(d)/token-c")
        defer { server3.stop() }
        let token3 = try String(contentsOfFile: "\(d)/token-c", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        var loop = ""
        for line in config.split(separator: "\n") where line.hasPrefix("url = ") {
            let url = line.dropFirst(7).dropLast().replacingOccurrences(of: server2.base, with: server3.base)
            let hash = url.suffix(64)
            loop += "curl -sS -o /dev/null -T \(d)/src/$(cat \(d)/names/\(hash)) -H 'Authorization: Bearer \(token3)' '\(url)'\n"
        }
        try loop.write(toFile: "\(d)/loop.sh", atomically: true, encoding: .utf8)
        let loopChildren0 = Bench.childrenCPUSeconds(), server3CPU0 = server3.cpuSeconds()
        let l0 = Bench.now()
        try Bench.sh("sh \(d)/loop.sh")
        let loopWall = Bench.now() - l0
        let loopCPU = Bench.childrenCPUSeconds() - loopChildren0
        let loopServerCPU = server3.cpuSeconds() - server3CPU0
        server3.stop()

        // --- 3: re-sent bytes after a SIGKILL mid-upload ---
        print("SIGKILL in the middle of a \(o.killMiB) MiB upload ...")
        try mount.setting("paused", "on")
        try Bench.sh("head -c \(o.killMiB)M /dev/urandom > '\(d)/mnt/Camera Roll/video.mov'")
        let w0 = Bench.ioCounter(pid: server.pid, "wchar")
        try mount.setting("paused", "off")
        var atKill: Int64 = 0
        for _ in 0..<20_000 {
            atKill = Bench.ioCounter(pid: server.pid, "wchar") - w0
            if atKill > Int64(o.killMiB) << 18 { break }   // a quarter of the file
            usleep(1000)
        }
        mount.kill9()
        mount = try Mount(vdrive: vdrive, dir: d, server: server.base, token: "\(d)/token-a")
        try mount.waitUntilBackedUp(done: o.photos + 1)
        let resent = Bench.ioCounter(pid: server.pid, "wchar") - w0 - Int64(o.killMiB) << 20

        // --- 5: RSS with many catalog entries and a large upload in flight ---
        print("RSS with \(o.entries) catalog entries and a \(o.rssGiB) GiB upload ...")
        try Bench.sh("mkdir \(d)/mnt/many && cd \(d)/mnt/many && seq 1 \(o.entries) | sed 's/^/entry-/' | xargs touch")
        try mount.setting("paused", "on")
        try Bench.sh("head -c \(o.rssGiB)G /dev/urandom > '\(d)/mnt/Camera Roll/big.mov'")
        let sampler = RSSSampler(pid: mount.pid)
        sampler.start()
        try mount.setting("paused", "off")
        try mount.waitUntilBackedUp(done: o.photos + 2, seconds: 1200)
        let peakRSS = Double(sampler.stop()) / 1024

        // --- 4: idle CPU ---
        print("Idle mount for \(o.idleSeconds) s ...")
        let idle0 = Bench.cpuSeconds(pid: mount.pid)
        sleep(UInt32(o.idleSeconds))
        let idleShare = (Bench.cpuSeconds(pid: mount.pid) - idle0) / Double(o.idleSeconds) * 100

        print("")
        print(Bench.table(["backup benchmark (\(o.photos) photos of \(o.photoMB) MB)", "vdrive: cp into Camera Roll until backed up", "curl -T, one process per file", "curl -T, one process for all"], [
            ["wall time (s)", Bench.f(driveWall) + " (" + Bench.f(driveWall / loopWall) + "x, " + Bench.f(driveWall / curlWall) + "x; cp alone " + Bench.f(copied) + ")", Bench.f(loopWall), Bench.f(curlWall)],
            ["client CPU (s per GB): mount process / curl", Bench.f(driveCPU / gb) + " (" + Bench.f(driveCPU / loopCPU) + "x, " + Bench.f(driveCPU / curlCPU) + "x)", Bench.f(loopCPU / gb), Bench.f(curlCPU / gb)],
            ["server CPU (s per GB)", Bench.f(driveServerCPU / gb), Bench.f(loopServerCPU / gb), Bench.f(curlServerCPU / gb)],
            ["bytes read from storage per byte uploaded", Bench.f(readPerByte, 3), "-", "-"],
            ["bytes re-sent after SIGKILL mid-upload (\(o.killMiB) MiB, \(atKill >> 20) MiB sent)", "\(resent)", "-", "-"],
            ["idle mount CPU over \(o.idleSeconds) s (% of a core)", Bench.f(idleShare, 3), "-", "-"],
            ["peak RSS, \(o.entries) entries + \(o.rssGiB) GiB upload (MB)", Bench.f(peakRSS, 1), "-", "-"],
        ]))
        mount.stop()
        _ = try? Bench.sh("rm -rf \(d)/src")
    }

    /// A fresh server with one device, whose token goes to `tokenFile`.
    static func startServer(_ vdrive: String, data: String, tokenFile: String) throws -> RunningServer {
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        let token = try DeviceRegistry(dataDirectory: data).add("bench")
        try token.write(toFile: tokenFile, atomically: true, encoding: .utf8)
        return try RunningServer(vdrive: vdrive, data: data, extra: [])
    }

    /// A foreground mount with camera backup on, against one server.
    struct Mount {
        let process = Process()
        let dir: String
        var pid: Int32 { process.processIdentifier }
        var environment: [String: String] {
            var env = ProcessInfo.processInfo.environment
            env["XDG_CONFIG_HOME"] = dir + "/config"
            env["XDG_DATA_HOME"] = dir + "/data"
            return env
        }

        init(vdrive: String, dir: String, server: String, token: String) throws {
            self.dir = dir
            process.executableURL = URL(fileURLWithPath: vdrive)
            process.arguments = ["mount", dir + "/mnt", "--state", dir + "/state", "-f", "--camera-backup", "--server", server, "--token-file", token]
            process.environment = environment
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try process.run()
            try Bench.waitForMount(dir + "/mnt")
        }

        func setting(_ key: String, _ value: String) throws {
            let p = Process()
            p.executableURL = process.executableURL
            p.arguments = ["settings", key, value]
            p.environment = environment
            p.standardOutput = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
        }

        /// Polls the engine's status file on disk (not through the mount) until `done` items are done.
        func waitUntilBackedUp(done: Int, seconds: Int = 900) throws {
            for _ in 0..<(seconds * 20) {
                if let data = FileManager.default.contents(atPath: dir + "/state/status.json"),
                   let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                   (json["itemsLeft"] as? Int) == 0, (json["itemsDone"] as? Int ?? 0) >= done { return }
                usleep(50_000)
            }
            throw Bench.Failure(description: "backup did not finish in \(seconds) s")
        }

        func kill9() {
            kill(pid, SIGKILL)
            process.waitUntilExit()
            _ = try? Bench.sh("fusermount3 -u -z \(dir)/mnt")
        }

        func stop() {
            guard process.isRunning else { return }
            _ = try? Bench.sh("fusermount3 -u \(dir)/mnt")
            process.waitUntilExit()
        }
    }
}
