import Client
import Crypto
import Foundation
import ObjectStore
import Protocol
import Server
import TestSupport

/// `vdrive-bench scale`: simulated devices uploading photos through `vdrive serve`
/// processes that keep blocks in a real SeaweedFS, against the same bytes sent by the
/// curl CLI straight to SeaweedFS with presigned PUTs (the floor: what the store takes
/// with no server at all). Prints aggregate throughput, the ratio, and each server's
/// peak RSS and CPU seconds (its only work on blob bytes is the one verification read).
///
/// Each device is a thread with its own `WorkspaceClient`, on server `d mod N`; per photo
/// it asks the plan, PUTs the block to the store, has the server verify it and records
/// the file, exactly as the backup engine does (`ClientTransport`). The photos' block
/// hashes are computed before the clock starts: the drive hashes while a file is written,
/// so an upload never hashes. curl gets one process per device with a config of that
/// device's presigned PUTs (connections kept alive), run in parallel. `--read-back` adds
/// the floor of any design that reads each object back before it counts: curl's PUTs,
/// each followed by a GET of the object. `--store-cpus` gives the store CPUs of its own,
/// as a store on machines of its own would have.
enum ScaleBenchmark {
    static let usage = "       vdrive-bench scale [--devices N] [--photos N] [--photo-kib N] [--servers N[,N…]] [--rounds N] [--embedded] [--read-back] [--no-warm-up] [--store-cpus LIST] [--dir DIR] [--vdrive PATH]"

    struct Options {
        var devices = 8
        var photos = 1000
        var photoKiB = 1024
        var servers = [2]
        var dir = NSTemporaryDirectory() + "vdrive-bench-scale"
        var vdrive = Bench.sibling("vdrive")
        /// Also the same devices against one embedded server (tus into its own folder).
        var embedded = false
        /// Also curl's PUTs each followed by a GET of the object: the verification read's floor.
        var readBack = false
        /// Rounds of [the server counts' runs, the read-back floor], each between curl runs.
        var rounds = 1
        /// A curl run before the runs that count (`--no-warm-up` skips it).
        var warmUp = true
        /// CPUs for SeaweedFS alone (`taskset -c` list); run the benchmark itself under
        /// `taskset -c` on the others, so the store has cores of its own.
        var storeCPUs: String?
    }

    struct Photo {
        let path: String
        let manifest: BlockManifest
    }

    static func run(_ arguments: [String]) throws {
        var o = Options()
        try Bench.parseOptions(arguments, values: [
            "--devices": { o.devices = try Bench.count($0) },
            "--photos": { o.photos = try Bench.count($0) },
            "--photo-kib": { o.photoKiB = try Bench.count($0) },
            "--servers": { o.servers = $0.split(separator: ",").compactMap { Int($0) } },
            "--dir": { o.dir = $0 },
            "--vdrive": { o.vdrive = $0 },
            "--store-cpus": { o.storeCPUs = $0 },
            "--rounds": { o.rounds = try Bench.count($0) },
        ], flags: ["--embedded": { o.embedded = true }, "--read-back": { o.readBack = true }, "--no-warm-up": { o.warmUp = false }])
        guard o.photoKiB * 3 / 2 * 1024 <= Blocks.size else { throw Bench.Failure(description: "--photo-kib must keep photos within one 4 MiB block (at most 2730)") }
        try? FileManager.default.removeItem(atPath: o.dir)
        try FileManager.default.createDirectory(atPath: o.dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: o.dir) }

        say("scale: \(o.devices) devices × \(o.photos) photos of \(o.photoKiB / 2)–\(o.photoKiB * 3 / 2) KiB (mean \(o.photoKiB) KiB), servers \(o.servers)")
        let photos = try makePhotos(o)
        let totalBytes = photos.joined().reduce(Int64(0)) { $0 + $1.manifest.size }
        say("  photos: \(photos.joined().count) files, \(Bench.f(Double(totalBytes) / 1e9)) GB")

        if let cpus = o.storeCPUs {
            let others = Bench.allowedCPUs()
            say("  SeaweedFS on CPUs \(cpus); devices, servers and curl on CPUs \(others)")
            if !Bench.cpuSet(others).isDisjoint(with: Bench.cpuSet(cpus)) { say("  (they share CPUs \(cpus): run this command under taskset -c on the other CPUs)") }
        }
        let weed = try SeaweedFS(folder: o.dir + "/seaweed", cpus: o.storeCPUs)
        defer { weed.stop() }
        let credentials = o.dir + "/s3-credentials"
        try "aws_access_key_id = \(weed.accessKey)\naws_secret_access_key = \(weed.secretKey)\n".write(toFile: credentials, atomically: true, encoding: .utf8)
        let location = try S3Location.parse(weed.storeURL)
        let s3 = S3Store(location: location, credentials: S3Credentials(accessKey: weed.accessKey, secretKey: weed.secretKey))
        try s3.createBucket()

        // The store's own CPU per run: what the verification read adds to its work.
        let gigabytes = Double(totalBytes) / 1e9
        func storeCPU(_ body: () throws -> Void) rethrows -> String {
            let before = Bench.cpuSeconds(pid: weed.pid ?? 0)
            try body()
            return Bench.f((Bench.cpuSeconds(pid: weed.pid ?? 0) - before) / gigabytes)
        }
        // The store's cost per byte drifts as it fills (measured: 9.1 CPU-s per GB for the
        // first 8 GB, 6.8 after 30 GB), so every run that is not curl's is compared with the
        // mean of the two curl runs around it: curl, the runs of a round, curl, the next
        // round, ..., curl.
        struct Run {
            var label: String, servers = "–", seconds: Double, rate: Double
            var rss = "–", cpu = "–", cpuPerGB = "–", store = "–", clients = "–"
            var isCurl = false
            func cells(against curl: Double) -> [String] {
                [label, servers, Bench.f(seconds), Bench.f(rate, 0), isCurl ? "(\(Bench.f(curl, 0)))" : Bench.f(rate / curl),
                 rss, cpu, cpuPerGB, store, clients]
            }
        }
        var curlRuns = 0
        func curlBaseline(readBack: Bool = false) throws -> Run {
            var r = CurlRun(seconds: 0, cpu: 0)
            curlRuns += 1
            let store = try storeCPU { r = try curlRun(o, photos: photos, store: s3, prefix: "curl-\(curlRuns)", readBack: readBack) }
            let rate = Double(totalBytes) / r.seconds / 1e6
            say("  curl straight to SeaweedFS\(readBack ? ", each object read back" : ""): \(Bench.f(r.seconds)) s, \(Bench.f(rate, 0)) MB/s")
            let label = readBack ? "curl → SeaweedFS, PUT then GET of each object (the verification read, no server, no hash)"
                                 : "curl → SeaweedFS (presigned PUT)"
            return Run(label: label, seconds: r.seconds, rate: rate, store: store, clients: Bench.f(r.cpu / gigabytes), isCurl: !readBack)
        }
        /// A device run's row; `store` nil for the embedded server (tus into its folder).
        func devicesRun(servers count: Int, round: Int, store: String?) throws -> Run {
            var r = DeviceRun(seconds: 0, rss: [], cpu: [], devicesCPU: 0)
            var storeCPUPerGB = "–"
            if let store {
                storeCPUPerGB = try storeCPU { r = try deviceRun(o, photos: photos, servers: count, round: round, store: store) }
            } else {
                r = try deviceRun(o, photos: photos, servers: count, round: round, store: nil)
            }
            let rate = Double(totalBytes) / r.seconds / 1e6
            let what = store == nil ? "embedded (tus)" : "\(count) server(s)"
            say("  vdrive, \(what): \(Bench.f(r.seconds)) s, \(Bench.f(rate, 0)) MB/s, RSS \(r.rss.map { Bench.f($0, 1) }) MB, CPU \(r.cpu.map { Bench.f($0) }) s")
            return Run(label: store == nil ? "devices → 1 vdrive serve, embedded (tus to its disk)" : "devices → \(count) vdrive serve → SeaweedFS",
                       servers: "\(count)", seconds: r.seconds, rate: rate, rss: r.rss.map { Bench.f($0, 1) }.joined(separator: ", "),
                       cpu: r.cpu.map { Bench.f($0) }.joined(separator: ", "), cpuPerGB: Bench.f(r.cpu.reduce(0, +) / gigabytes), store: storeCPUPerGB,
                       clients: Bench.f(r.devicesCPU / gigabytes))
        }
        // A fresh SeaweedFS spends the most per byte: a curl run that does not count first.
        if o.warmUp {
            let store = try storeCPU { _ = try curlRun(o, photos: photos, store: s3, prefix: "warm-up", readBack: false) }
            say("  warm-up (curl, not counted): store \(store) CPU-s per GB")
        }
        var runs = [try curlBaseline()]
        var serverRun = 0
        for _ in 0..<o.rounds {
            for count in o.servers {
                runs.append(try devicesRun(servers: count, round: serverRun, store: weed.storeURL + "&credentials=" + credentials))
                serverRun += 1
            }
            // What the verification read costs with no server at all: the floor of any
            // design that reads each object back once before its block counts.
            if o.readBack { runs.append(try curlBaseline(readBack: true)) }
            runs.append(try curlBaseline())
        }
        // The same devices and photos against one embedded server: what a server spends
        // when the bytes do go through it (compared with the last curl run).
        if o.embedded { runs.append(try devicesRun(servers: 1, round: serverRun, store: nil)) }
        // Each run against the mean of the curl runs before and after it.
        var rows: [[String]] = []
        var ratios: [String: [Double]] = [:]
        for (i, run) in runs.enumerated() {
            let before = runs[..<i].last(where: \.isCurl)?.rate ?? run.rate
            let after = runs[(i + 1)...].first(where: \.isCurl)?.rate ?? before
            let curl = run.isCurl ? run.rate : (before + after) / 2
            rows.append(run.cells(against: curl))
            if !run.isCurl { ratios[run.label + " (\(run.servers))", default: []].append(run.rate / curl) }
        }
        say()
        say(Bench.table(["run", "servers", "seconds", "MB/s", "× curl around it (curl's own rate)", "server peak RSS MB", "server CPU s",
                         "server CPU s per GB", "store CPU s per GB", "devices' (or curl's) CPU s per GB"], rows))
        if o.rounds > 1 {
            say()
            for (label, r) in ratios.sorted(by: { $0.key < $1.key }) where r.count > 1 {
                say("  \(label): median \(Bench.f(r.sorted()[r.count / 2]))× curl over \(r.count) rounds (\(r.map { Bench.f($0) }.joined(separator: ", ")))")
            }
        }
    }

    /// Pseudo-random photos, sizes spread over ±50 % of the mean, hashed as written.
    static func makePhotos(_ o: Options) throws -> [[Photo]] {
        var out: [[Photo]] = []
        for d in 0..<o.devices {
            let folder = o.dir + "/photos/d\(d)"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            var device: [Photo] = []
            for i in 0..<o.photos {
                let size = o.photoKiB * 1024 / 2 + (i * 7919 + d * 104_729) % (o.photoKiB * 1024)
                let bytes = randomBytes(size, seed: UInt64(d * 1_000_003 + i + 1))
                let path = folder + "/IMG_\(i).jpg"
                ServerBenchmark.writeAll(path, bytes)
                let hasher = ContentHasher()
                bytes.withUnsafeBytes { hasher.update($0) }
                let (content, blocks) = hasher.finish()
                device.append(Photo(path: path, manifest: BlockManifest(content: content, size: Int64(size), blocks: blocks)))
            }
            out.append(device)
        }
        return out
    }

    /// The baseline: each device's photos PUT by one curl process (keep-alive across its
    /// config) to presigned URLs of their own keys, all devices at once.
    /// With `readBack`, each PUT is followed by a presigned GET of the same object (to
    /// /dev/null): the store's side of the verification read, with no server and no hash.
    static func curlRun(_ o: Options, photos: [[Photo]], store: S3Store, prefix: String, readBack: Bool) throws -> CurlRun {
        var configs: [String] = []
        for (d, device) in photos.enumerated() {
            var text = ""
            for (i, photo) in device.enumerated() {
                let block = photo.manifest.blocks[0]
                let put = store.presignPut("\(prefix)/d\(d)/\(i)-" + block.hex, length: photo.manifest.size, sha256: block, expiresIn: 3600)
                if i > 0 { text += "next\n" }
                text += "url = \"\(put.url)\"\nupload-file = \"\(photo.path)\"\noutput = \"/dev/null\"\nfail\nsilent\nshow-error\n"
                for (name, value) in put.headers where name != "content-length" { text += "header = \"\(name): \(value)\"\n" }
                text += "header = \"Expect:\"\n"
                if readBack {
                    let get = store.presignGet("\(prefix)/d\(d)/\(i)-" + block.hex, expiresIn: 3600)
                    text += "next\nurl = \"\(get.url)\"\noutput = \"/dev/null\"\nfail\nsilent\nshow-error\n"
                }
            }
            let path = o.dir + "/curl-\(d).cfg"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            configs.append(path)
        }
        let children = Bench.childrenCPUSeconds()
        let start = Bench.now()
        let pids = try configs.map { try TimedCommand.spawn(["curl", "-K", $0], output: o.dir + "/curl.log") }
        for pid in pids {
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            guard status == 0 else { throw Bench.Failure(description: "curl failed (\(TimedCommand.describe(status))); see \(o.dir)/curl.log") }
        }
        let seconds = Bench.now() - start
        let cpu = Bench.childrenCPUSeconds() - children
        // Every object is there, at its size.
        for (d, device) in photos.enumerated() {
            for (i, photo) in device.enumerated() where i % 97 == 0 {
                guard try store.head("\(prefix)/d\(d)/\(i)-" + photo.manifest.blocks[0].hex) == photo.manifest.size else {
                    throw Bench.Failure(description: "curl's object d\(d)/\(i) is missing or short")
                }
            }
        }
        return CurlRun(seconds: seconds, cpu: cpu)
    }

    struct CurlRun { var seconds: Double; var cpu: Double }
    /// `devicesCPU`: the device threads' (this process's) CPU seconds during the run.
    struct DeviceRun { var seconds: Double; var rss: [Double]; var cpu: [Double]; var devicesCPU: Double }

    /// The devices through `count` server processes sharing one records file and the
    /// bucket (`store`), or one embedded server (`store` nil: tus into its folder).
    static func deviceRun(_ o: Options, photos: [[Photo]], servers count: Int, round: Int, store: String?) throws -> DeviceRun {
        let data = o.dir + "/server-\(round)"
        let tokens = try (0..<o.devices).map { try DeviceRegistry(dataDirectory: data).add("device-\($0)") }
        let servers = try (0..<count).map { _ in try RunningServer(vdrive: o.vdrive, data: data, extra: store.map { ["--store", $0] } ?? []) }
        defer { for s in servers { s.stop() } }
        let samplers = servers.map { RSSSampler(pid: $0.pid) }
        for s in samplers { s.start() }
        let cpuBefore = servers.map { $0.cpuSeconds() }
        let failures = FailureList()
        let bases = servers.map(\.base)
        let ownBefore = Bench.ownCPUSeconds()
        let start = Bench.now()
        Bench.onThreads(o.devices) { d in
            let client = WorkspaceClient(baseURL: bases[d % count], token: tokens[d])
            do {
                for (i, photo) in photos[d].enumerated() {
                    let fd = open(photo.path, O_RDONLY)
                    guard fd >= 0 else { throw Bench.Failure(description: "cannot open \(photo.path)") }
                    defer { close(fd) }
                    try client.uploadFile(fd: fd, size: photo.manifest.size, manifest: photo.manifest)
                    try client.recordFile(FileRecord(path: "Camera Roll/IMG_\(i).jpg", hash: photo.manifest.content.hex, size: photo.manifest.size,
                                                     blocks: photo.manifest.blocks.map(\.hex), captureDate: nil, mtime: 0, deviceSequence: Int64(i + 1)))
                }
            } catch {
                failures.add("device \(d): \(error)")
            }
        }
        let seconds = Bench.now() - start
        let devicesCPU = Bench.ownCPUSeconds() - ownBefore
        let cpu = zip(servers, cpuBefore).map { $0.cpuSeconds() - $1 }
        let rss = samplers.map { Double($0.stop()) / 1024 }
        if let first = failures.first { throw Bench.Failure(description: first) }
        // Every photo is recorded and present (verified) on the servers.
        let check = WorkspaceClient(baseURL: servers[0].base, token: tokens[0])
        let all = photos.joined().map(\.manifest.content)
        guard try check.presentContents(all).count == Set(all).count else { throw Bench.Failure(description: "not every photo is present after the run") }
        return DeviceRun(seconds: seconds, rss: rss, cpu: cpu, devicesCPU: devicesCPU)
    }
}

/// Errors of the device threads. `@unchecked Sendable`: guarded by `lock`.
private final class FailureList: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.lock(); items.append(s); lock.unlock() }
    var first: String? { lock.lock(); defer { lock.unlock() }; return items.first }
}
