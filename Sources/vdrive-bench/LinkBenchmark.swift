import Foundation
import TestSupport

/// `vdrive-bench link [--dir DIR] [--photos N] [--photo-bytes N] [--video-mb N] [--delay-ms N] [--mbit N] [--rounds N] [--skip-video] [--skip-photos] [--baseline-vdrive PATH]`
///
/// Backup over a real link, against the link's own rate (target: at least 0.9x). A `LinkProxy` (TestSupport: one-way delay each way,
/// one rate cap shared by all connections) sits between the uploader and a real
/// `vdrive serve` on loopback; the presigned URLs the server hands out name the proxy
/// (they follow the request's Host), so every byte crosses it. Per workload, side by side:
///
/// - the link alone: bytes / rate (what no uploader can beat);
/// - `curl --parallel --parallel-max 4` speaking the block protocol through the proxy
///   (`CurlPeer`: plans, presigned PATCH per block, records, each phase 4 at a time);
/// - the drive: `cp` into the mounted Camera Roll until the engine says backed up, the
///   mount's `--server` being the proxy. Timed from the start of `cp` and from its end
///   (a file is sent once it is closed).
///
/// Workloads: `--photos` photos of `--photo-bytes` bytes (40 of 3,000,000: a
/// phone's burst of photos), and one video of `--video-mb` MB (1000).
enum LinkBenchmark {
    static let usage = "       vdrive-bench link [--photos N] [--photo-bytes N] [--video-mb N] [--delay-ms N] [--mbit N] [--rounds N] [--skip-video] [--skip-photos] [--baseline-vdrive PATH] [--dir DIR]"

    struct Options {
        var dir = "/var/tmp/vdrive-bench-link"
        var photos = 40, photoBytes = 3_000_000, videoMB = 1000, delayMs = 25.0, mbit = 100.0, rounds = 1
        var video = true, photosOn = true
        /// Another `vdrive` build (e.g. of the commit before a change) run beside this one.
        var baselineVdrive: String?
    }

    static func run(_ args: [String]) throws {
        var o = Options()
        try Bench.parseOptions(args, values: [
            "--dir": { o.dir = $0 },
            "--photos": { o.photos = try Bench.count($0) },
            "--photo-bytes": { o.photoBytes = try Bench.count($0) },
            "--video-mb": { o.videoMB = try Bench.count($0) },
            "--delay-ms": { o.delayMs = try Bench.number($0) },
            "--mbit": { o.mbit = try Bench.number($0, above0: true) },
            "--rounds": { o.rounds = try Bench.count($0) },
            "--baseline-vdrive": { o.baselineVdrive = $0 },
        ], flags: [
            "--skip-video": { o.video = false },
            "--skip-photos": { o.photosOn = false },
        ])
        let vdrive = Bench.sibling("vdrive")
        let d = o.dir
        _ = try? Bench.sh("fusermount3 -u -z \(d)/drive/mnt 2>/dev/null; true")
        try Bench.sh("rm -rf \(d) && mkdir -p \(d)/photos \(d)/video")
        let rate = o.mbit * 1e6 / 8
        var rows: [[String]] = []

        var workloads: [(String, String, Int64)] = []
        if o.photosOn {
            print("link: preparing \(o.photos) photos of \(o.photoBytes) bytes ...")
            try Bench.sh("for i in $(seq 1 \(o.photos)); do head -c \(o.photoBytes) /dev/urandom > \(d)/photos/IMG_$i.jpg; done")
            workloads.append(("\(o.photos) photos of \(Bench.f(Double(o.photoBytes) / 1e6, 1)) MB", "photos", Int64(o.photos) * Int64(o.photoBytes)))
        }
        if o.video {
            print("link: preparing one video of \(o.videoMB) MB ...")
            try Bench.sh("head -c \(o.videoMB * 1_000_000) /dev/urandom > \(d)/video/VID_1.mov")
            workloads.append(("one video of \(o.videoMB) MB", "video", Int64(o.videoMB) * 1_000_000))
        }

        for (label, folder, bytes) in workloads {
            let names = try FileManager.default.contentsOfDirectory(atPath: "\(d)/\(folder)").sorted()
            let files = try names.map { try PeerFile.prepare(path: "\(d)/\(folder)/\($0)", name: $0, blockDir: "\(d)/blocks-\(folder)") }
            let alone = Double(bytes) / rate
            var curlTimes: [Double] = [], driveTimes: [Double] = [], driveAfterCP: [Double] = []
            var baseTimes: [Double] = [], baseAfterCP: [Double] = []
            for r in 1...o.rounds {
                // curl, 4 at a time, through the proxy.
                let s = try BackupBenchmark.startServer(vdrive, data: "\(d)/peer-server", tokenFile: "\(d)/peer-token")
                let token = try String(contentsOfFile: "\(d)/peer-token", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
                let proxy = try LinkProxy(targetPort: port(of: s.base), oneWayDelay: o.delayMs / 1000, bytesPerSecond: rate)
                let t0 = Bench.now()
                do {
                    _ = try CurlPeer.upload(files, base: "http://127.0.0.1:\(proxy.port)", token: token, dir: "\(d)/curl", parallel: 4)
                } catch {
                    proxy.stop(); s.stop()
                    throw error
                }
                curlTimes.append(Bench.now() - t0)
                proxy.stop()
                s.stop()
                try Bench.sh("rm -rf \(d)/peer-server \(d)/peer-token")

                // The drive, through the proxy (and the baseline build's, when given).
                func driveRun(_ binary: String) throws -> (Double, Double) {
                    var proxy2: LinkProxy?
                    let m = try BackupBenchmark.DriveRun(vdrive: binary, dir: "\(d)/drive") { server in
                        let p = try LinkProxy(targetPort: port(of: server.base), oneWayDelay: o.delayMs / 1000, bytesPerSecond: rate)
                        proxy2 = p
                        return "http://127.0.0.1:\(p.port)"
                    }
                    defer { m.stop(); proxy2?.stop() }
                    let t1 = Bench.now()
                    try Bench.sh("cp \(d)/\(folder)/* '\(d)/drive/mnt/Camera Roll/'")
                    let copied = Bench.now()
                    try m.mount.waitUntilBackedUp(done: files.count, seconds: 3600)
                    let t2 = Bench.now()
                    return (t2 - t1, t2 - copied)
                }
                let (whole, afterCP) = try driveRun(vdrive)
                driveTimes.append(whole)
                driveAfterCP.append(afterCP)
                print("link \(label) round \(r): link alone \(Bench.f(alone)) s, curl --parallel-max 4 \(Bench.f(curlTimes.last!)) s, drive \(Bench.f(whole)) s (\(Bench.f(afterCP)) s after cp)")
                if let baseline = o.baselineVdrive {
                    let (bw, ba) = try driveRun(baseline)
                    baseTimes.append(bw)
                    baseAfterCP.append(ba)
                    print("link \(label) round \(r): baseline drive \(Bench.f(bw)) s (\(Bench.f(ba)) s after cp)")
                }
            }
            func cells(_ v: [Double]) -> String {
                v.map { "\(Bench.f($0)) s (\(Bench.f(alone / $0))x)" }.joined(separator: " / ")
            }
            var row = [label, "\(Bench.f(alone)) s", cells(curlTimes), cells(driveTimes), cells(driveAfterCP)]
            if o.baselineVdrive != nil { row += [cells(baseTimes), cells(baseAfterCP)] }
            rows.append(row)
        }
        print("")
        print("Link: \(Bench.f(o.delayMs, 0)) ms each way (RTT \(Bench.f(2 * o.delayMs, 0)) ms), \(Bench.f(o.mbit, 0)) Mbit/s shared; cells: time (link throughput share = link alone / time)")
        var header = ["workload", "link alone (bytes / rate)", "curl --parallel --parallel-max 4, block protocol", "drive: cp into Camera Roll until backed up", "drive, from the end of cp"]
        if let baseline = o.baselineVdrive { header += ["baseline drive (\(baseline))", "baseline, from the end of cp"] }
        print(Bench.table(header, rows))
        _ = try? Bench.sh("rm -rf \(d)/photos \(d)/video \(d)/blocks-photos \(d)/blocks-video")
    }

    static func port(of base: String) throws -> UInt16 {
        guard let p = base.split(separator: ":").last.flatMap({ UInt16($0.prefix { $0.isNumber }) }) else {
            throw Bench.Failure(description: "no port in \(base)")
        }
        return p
    }
}
