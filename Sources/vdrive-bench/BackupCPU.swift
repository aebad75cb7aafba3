import Foundation

/// CPU per gigabyte backed up, against the honest peer (target: at most 1.5x). Every round, side by
/// side on the same files (N photos of `--photo-mb` MB, distinct, source in page cache):
///
/// - peer: `cp` of the photos into a plain folder, then `curl` uploading the same files to
///   a fresh `vdrive serve` through the block protocol (`CurlPeer`: plans, presigned tus
///   PATCH per block, records; one curl process per phase, one kept-alive connection).
///   CPU = cp + curl (getrusage of the children) + the server (/proc/PID/stat). The peer
///   is given the block and content hashes (computed before, not counted); the `sha256sum`
///   of the same files is printed beside it for scale.
/// - drive: `cp` of the same photos into the mounted Camera Roll until the engine's status
///   says they are all backed up. CPU = cp + the mount process + the server.
///
/// With `--perf FILE`, one more drive run (not counted) under `perf record -p <mount>`, and
/// `perf report --no-children --sort dso,sym` of it written to `FILE.txt`.
extension BackupBenchmark {
    struct CPURound {
        var peerCP = 0.0, peerCurl = 0.0, peerServer = 0.0, peerWall = 0.0, hash = 0.0, hashOpenSSL = 0.0
        var driveCP = 0.0, driveMount = 0.0, driveServer = 0.0, driveWall = 0.0
        /// The same drive run with `--baseline-vdrive` (another build, e.g. before a change).
        var baseCP = 0.0, baseMount = 0.0, baseServer = 0.0, baseWall = 0.0
        var peer: Double { peerCP + peerCurl + peerServer }
        var drive: Double { driveCP + driveMount + driveServer }
        var base: Double { baseCP + baseMount + baseServer }
    }

    static func cpuSection(_ o: Options, vdrive: String) throws {
        let d = o.dir
        let n = o.cpuPhotos
        print("cpu: preparing \(n) photos of \(o.photoMB) MB in \(d)/src-cpu ...")
        try Bench.sh("mkdir -p \(d)/src-cpu && head -c \(o.photoMB)M /dev/urandom > \(d)/one && for i in $(seq 1 \(n)); do cp \(d)/one \(d)/src-cpu/IMG_$i.jpg; printf %016d $i | dd of=\(d)/src-cpu/IMG_$i.jpg bs=1 seek=0 conv=notrunc status=none; done && rm \(d)/one")
        // Hashed from the sources; curl sends the plain folder's copies (the same bytes).
        let files = try (1...n).map { i in
            var f = try PeerFile.prepare(path: "\(d)/src-cpu/IMG_\(i).jpg", name: "IMG_\(i).jpg", blockDir: "\(d)/blocks")
            f.path = "\(d)/plain/IMG_\(i).jpg"
            f.blockFiles = [f.path]
            return f
        }
        let bytes = Int64(n) * Int64(o.photoMB) << 20
        let gb = Double(bytes) / 1e9
        var rounds: [CPURound] = []
        for r in 1...o.rounds {
            var x = CPURound()
            // The peer.
            try Bench.sh("rm -rf \(d)/plain && mkdir -p \(d)/plain")
            let s = try startServer(vdrive, data: "\(d)/peer-server", tokenFile: "\(d)/peer-token")
            let token = try String(contentsOfFile: "\(d)/peer-token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            var c0 = Bench.childrenCPUSeconds()
            let s0 = s.cpuSeconds()
            let t0 = Bench.now()
            try Bench.sh("cp \(d)/src-cpu/* \(d)/plain/")
            x.peerCP = Bench.childrenCPUSeconds() - c0
            c0 = Bench.childrenCPUSeconds()
            let sent = try CurlPeer.upload(files, base: s.base, token: token, dir: "\(d)/curl", parallel: nil)
            x.peerCurl = Bench.childrenCPUSeconds() - c0
            x.peerWall = Bench.now() - t0
            x.peerServer = s.cpuSeconds() - s0
            s.stop()
            guard sent.blocksSent == n else { throw Bench.Failure(description: "the peer sent \(sent.blocksSent) blocks, expected \(n)") }
            c0 = Bench.childrenCPUSeconds()
            try Bench.sh("sha256sum \(d)/plain/* > /dev/null")
            x.hash = Bench.childrenCPUSeconds() - c0
            c0 = Bench.childrenCPUSeconds()
            try Bench.sh("openssl dgst -sha256 \(d)/plain/* > /dev/null")
            x.hashOpenSSL = Bench.childrenCPUSeconds() - c0
            try Bench.sh("rm -rf \(d)/plain \(d)/peer-server \(d)/peer-token")

            // The drive (and the baseline build's drive, when given).
            (x.driveCP, x.driveMount, x.driveServer, x.driveWall) = try driveRound(vdrive: vdrive, dir: d, photos: n)
            if let baseline = o.baselineVdrive {
                (x.baseCP, x.baseMount, x.baseServer, x.baseWall) = try driveRound(vdrive: baseline, dir: d, photos: n)
            }
            rounds.append(x)
            if o.baselineVdrive != nil { print("cpu round \(r): baseline drive \(Bench.f(x.base)) s (cp \(Bench.f(x.baseCP)), mount \(Bench.f(x.baseMount)), server \(Bench.f(x.baseServer))); ratio \(Bench.f(x.base / x.peer))x") }
            print("cpu round \(r): peer \(Bench.f(x.peer)) s (cp \(Bench.f(x.peerCP)), curl \(Bench.f(x.peerCurl)), server \(Bench.f(x.peerServer))); drive \(Bench.f(x.drive)) s (cp \(Bench.f(x.driveCP)), mount \(Bench.f(x.driveMount)), server \(Bench.f(x.driveServer))); ratio \(Bench.f(x.drive / x.peer))x")
        }

        if let perf = o.perf {
            print("cpu: one more drive run under perf record -p <mount> ...")
            let m = try DriveRun(vdrive: vdrive, dir: "\(d)/drive")
            defer { m.stop() }
            try Bench.profile(pid: m.mount.pid, into: perf) {
                try Bench.sh("cp \(d)/src-cpu/* '\(d)/drive/mnt/Camera Roll/'")
                try m.mount.waitUntilBackedUp(done: n)
            }
            print("cpu: profile in \(perf).txt (by symbol) and \(perf).dso.txt (by library)")
        }

        func median(_ f: (CPURound) -> Double) -> Double {
            let v = rounds.map(f).sorted()
            return v.count % 2 == 1 ? v[v.count / 2] : (v[v.count / 2 - 1] + v[v.count / 2]) / 2
        }
        func perGB(_ f: @escaping (CPURound) -> Double) -> String {
            rounds.map { Bench.f(f($0) / gb) }.joined(separator: " / ")
        }
        var header = ["CPU per GB backed up, \(n) photos of \(o.photoMB) MB (s per GB; rounds \(rounds.count))", "peer: cp into a plain folder + curl (block protocol)", "drive: cp into Camera Roll until backed up"]
        var rows: [[String]] = [
            ["cp", perGB(\.peerCP), perGB(\.driveCP)],
            ["curl / the mount", perGB(\.peerCurl), perGB(\.driveMount)],
            ["server", perGB(\.peerServer), perGB(\.driveServer)],
            ["all processes", perGB(\.peer), perGB(\.drive)],
            ["all processes, ratio drive / peer (per round)", "1.00", rounds.map { Bench.f($0.drive / $0.peer) }.joined(separator: " / ")],
            ["median ratio", "", Bench.f(median { $0.drive / $0.peer })],
            ["sha256sum of the same files, for scale", perGB(\.hash), "-"],
            ["openssl dgst -sha256 of the same files (SHA-NI), for scale", perGB(\.hashOpenSSL), "-"],
            ["ratio drive / (peer + openssl dgst): the peer made to hash, median", "", Bench.f(median { $0.drive / ($0.peer + $0.hashOpenSSL) })],
            ["wall time (s)", rounds.map { Bench.f($0.peerWall) }.joined(separator: " / "), rounds.map { Bench.f($0.driveWall) }.joined(separator: " / ")],
        ]
        if let baseline = o.baselineVdrive {
            header.append("baseline drive (\(baseline))")
            let cells = [perGB(\.baseCP), perGB(\.baseMount), perGB(\.baseServer), perGB(\.base),
                         rounds.map { Bench.f($0.base / $0.peer) }.joined(separator: " / "), Bench.f(median { $0.base / $0.peer }),
                         "-", "-", Bench.f(median { $0.base / ($0.peer + $0.hashOpenSSL) }),
                         rounds.map { Bench.f($0.baseWall) }.joined(separator: " / ")]
            for i in rows.indices { rows[i].append(cells[i]) }
        }
        print("")
        print(Bench.table(header, rows))
    }

    /// One drive run of the cpu section: cp of the photos into a fresh mount's Camera Roll
    /// until backed up to a fresh server; CPU of cp, the mount and the server, and wall time.
    static func driveRound(vdrive: String, dir d: String, photos n: Int) throws -> (Double, Double, Double, Double) {
        let m = try DriveRun(vdrive: vdrive, dir: "\(d)/drive")
        defer { m.stop() }
        let c0 = Bench.childrenCPUSeconds()
        let m0 = Bench.cpuSeconds(pid: m.mount.pid)
        let s0 = m.server.cpuSeconds()
        let t0 = Bench.now()
        try Bench.sh("cp \(d)/src-cpu/* '\(d)/drive/mnt/Camera Roll/'")
        let cp = Bench.childrenCPUSeconds() - c0
        try m.mount.waitUntilBackedUp(done: n)
        return (cp, Bench.cpuSeconds(pid: m.mount.pid) - m0, m.server.cpuSeconds() - s0, Bench.now() - t0)
    }

    /// A fresh server and a fresh mount (state, config) in `dir`, backing up to it.
    struct DriveRun {
        let server: RunningServer
        let mount: Mount

        init(vdrive: String, dir: String, serverURL: ((RunningServer) throws -> String)? = nil) throws {
            try Bench.sh("rm -rf \(dir) && mkdir -p \(dir)/mnt \(dir)/config")
            server = try startServer(vdrive, data: "\(dir)/server", tokenFile: "\(dir)/token")
            do {
                mount = try Mount(vdrive: vdrive, dir: dir, server: try serverURL?(server) ?? server.base, token: "\(dir)/token")
            } catch {
                server.stop()
                throw error
            }
        }

        func stop() {
            mount.stop()
            server.stop()
        }
    }
}
