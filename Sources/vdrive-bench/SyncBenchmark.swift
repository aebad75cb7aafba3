import Client
import Crypto
import Foundation
import Protocol
import TestSupport

/// `vdrive-bench sync`: the synced workspace between devices, each a real mount of one
/// real `vdrive serve` on loopback (SyncDevices.swift). Rows, each runnable alone
/// (`--rows`), each with a fresh server and fresh devices:
///
/// - `propagation`: 100 changes of 2 KB files on device A (a create, then a rewrite of
///   it, by turns), each timed from its `close` on A until B's mount reads the new bytes
///   (B polled every 2 ms). Target: median ≤ 0.5 s, p99 ≤ 1 s.
/// - `bulk`: 10,000 files of 4-64 KiB of random bytes (347 MB, 100 folders) copied into
///   A (`cp -r`) until every one reads back identical on B, beside `rsync -a` of the
///   same folder to an `rsync --daemon` and beside two Syncthing instances (the copy into
///   one until the other has every file identical), on loopback, in the same run. The
///   same checker reads every file of the receiving side as it appears (by folder, every
///   100 ms) for all three. Target: ≤ 3x rsync, ≤ 0.5x Syncthing.
/// - `idle`: two synced, mounted devices left alone for `--idle-seconds`: each mount's
///   CPU and the requests each device made (the server's access log, `device=`).
///   Target: ≤ 0.1 % of a core, ≤ 1 request per device per held period (30 s).
/// - `storm`: both devices rewriting the same 100 files for `--storm-seconds`, then
///   until both trees are the same: every file there, every content one the devices
///   wrote, the last write of each file kept, conflict copies counted; the server's
///   RSS and the catalogs' sizes.
/// - `first-mount`: a workspace of `--files` small files (put on the server through its
///   API, 1,000 distinct contents), then a new device's first mount until `ls -R` on it
///   lists every one; that mount's peak RSS. Target: ≤ 100 MB.
///
/// One mode for now, the rows; another mode (a model-based run) would be another branch
/// of `run` with its own options.
enum SyncBenchmark {
    static let usage = "       vdrive-bench sync [--rows propagation,bulk,idle,storm,first-mount] [--changes N] [--bulk-files N] [--idle-seconds N] [--storm-seconds N] [--files N] [--dir DIR] [--vdrive PATH] [--perf PREFIX] [--timeline] [--anchors-first]"

    static let allRows = ["propagation", "bulk", "idle", "storm", "first-mount"]

    struct Options {
        var rows = SyncBenchmark.allRows
        var changes = 100
        var bulkFiles = 10_000
        var idleSeconds = 600
        var stormSeconds = 60
        var files = 100_000
        var dir = "/var/tmp/vdrive-bench-sync-rows"
        var vdrive = Bench.sibling("vdrive")
        /// `perf record` of A's mount, B's mount and the server during the bulk row's copy
        /// (`PREFIX-a`, `-b`, `-server`, each with its `.txt` report by symbol).
        var perf: String?
        /// A line every half second of the bulk row's vdrive leg: files identical on B, the
        /// CPU seconds of A, B and the server so far, the requests each device has finished.
        var timeline = false
        /// The bulk row's anchors (Syncthing, then rsync) before the drive instead of after it.
        var anchorsFirst = false
    }

    /// One line of the final table.
    struct Row {
        var figure: String
        var vdrive: String
        var anchor = "-"
        var target = "-"
        var met = "-"
    }

    static func run(_ arguments: [String]) throws {
        var o = Options()
        try Bench.parseOptions(arguments, values: [
            "--rows": { text in
                let rows = text.split(separator: ",").map { String($0) }
                guard !rows.isEmpty, rows.allSatisfy(allRows.contains) else { throw Bench.BadValue(expected: "rows among \(allRows.joined(separator: ","))") }
                o.rows = rows
            },
            "--changes": { o.changes = try Bench.count($0) },
            "--bulk-files": { o.bulkFiles = try Bench.count($0) },
            "--idle-seconds": { o.idleSeconds = try Bench.count($0) },
            "--storm-seconds": { o.stormSeconds = try Bench.count($0) },
            "--files": { o.files = try Bench.count($0) },
            "--dir": { o.dir = $0 },
            "--vdrive": { o.vdrive = $0 },
            "--perf": { o.perf = $0 },
        ], flags: ["--timeline": { o.timeline = true }, "--anchors-first": { o.anchorsFirst = true }])
        guard FileManager.default.isExecutableFile(atPath: o.vdrive) else {
            throw Bench.UsageError(description: "no vdrive at \(o.vdrive): build it beside vdrive-bench (swift build -c release) or pass --vdrive PATH")
        }
        try runRows(o)
    }

    static func runRows(_ o: Options) throws {
        BenchMounts.shared.unmountOnSignals()
        defer { BenchMounts.shared.unmountAll() }
        try FileManager.default.createDirectory(atPath: o.dir, withIntermediateDirectories: true)
        say("sync: rows \(o.rows.joined(separator: ", ")); vdrive \(o.vdrive); in \(o.dir)")
        var table: [Row] = []
        for row in o.rows {
            let start = Bench.now()
            say("sync: \(row) ...")
            switch row {
            case "propagation": table += try propagation(o)
            case "bulk": table += try bulk(o)
            case "idle": table += try idle(o)
            case "storm": table += try storm(o)
            case "first-mount": table += try firstMount(o)
            default: break
            }
            say("sync: \(row) took \(Bench.f(Bench.now() - start, 0)) s")
        }
        say()
        say(Bench.table(["figure", "vdrive", "anchor", "target", "met"], table.map { [$0.figure, $0.vdrive, $0.anchor, $0.target, $0.met] }))
    }

    // MARK: - Rows

    /// A workspace with devices A and B mounted and synced, for the body; stopped after it.
    /// `removeAfter` false: the caller removes the workspace's folder later.
    static func withPair<T>(_ o: Options, _ name: String, removeAfter: Bool = true,
                            _ body: (SyncWorkspace, SyncDevice, SyncDevice) throws -> T) throws -> T {
        let workspace = try SyncWorkspace(vdrive: o.vdrive, dir: o.dir + "/" + name)
        defer {
            workspace.stop()
            if removeAfter { _ = try? Bench.sh("rm -rf '\(workspace.dir)'") }
        }
        let a = try workspace.mount("device-a"), b = try workspace.mount("device-b")
        return try body(workspace, a, b)
    }

    static func propagation(_ o: Options) throws -> [Row] {
        try withPair(o, "propagation") { _, a, b in
            try FileManager.default.createDirectory(atPath: a.path("prop"), withIntermediateDirectories: false)
            try waitFor("the folder on B", seconds: 60, devices: [a, b]) { FileManager.default.fileExists(atPath: b.path("prop")) }
            var creates: [Double] = [], rewrites: [Double] = []
            for i in 0..<o.changes {
                let name = "prop/f\(i / 2).txt"
                let bytes = randomBytes(2048, seed: UInt64(i + 1))
                try writeWhole(a.path(name), bytes)
                let closed = Bench.now()
                let seen = try waitForBytes(b.path(name), bytes, seconds: 60)
                let latency = seen - closed
                if i % 2 == 0 { creates.append(latency) } else { rewrites.append(latency) }
                if (i + 1) % 20 == 0 { say("  propagation: \(i + 1) of \(o.changes) changes, last \(ms(latency))") }
            }
            let all = (creates + rewrites).sorted()
            let median = percentile(all, 0.5), p99 = percentile(all, 0.99)
            say("  propagation A→B of \(all.count) changes: median \(ms(median)), p99 \(ms(p99)), max \(ms(all.last ?? 0)); "
                + "creates median \(ms(percentile(creates.sorted(), 0.5))), rewrites median \(ms(percentile(rewrites.sorted(), 0.5)))")
            return [
                Row(figure: "propagation A→B, 2 KB file, \(all.count) changes: median", vdrive: ms(median), target: "≤ 500 ms", met: met(median <= 0.5)),
                Row(figure: "  p99 (max)", vdrive: "\(ms(p99)) (\(ms(all.last ?? 0)))", target: "≤ 1,000 ms", met: met(p99 <= 1)),
                Row(figure: "  medians of creates / rewrites", vdrive: "\(ms(percentile(creates.sorted(), 0.5))) / \(ms(percentile(rewrites.sorted(), 0.5)))"),
            ]
        }
    }

    static func bulk(_ o: Options) throws -> [Row] {
        try SyncPeers.ensureInstalled(["rsync": "rsync", "syncthing": "syncthing"])
        // Each leg's files are removed after the last leg, not before the next: on a disk
        // where a new inode skips those freed in the last minutes (ext4 without a journal,
        // as here: 10,000 creates took 2-5 s right after 30,000 deletes, 0.2 s otherwise),
        // a leg would pay for the one before it.
        let source = o.dir + "/bulk-source", rsyncDir = o.dir + "/rsync", stDir = o.dir + "/syncthing"
        for dir in [o.dir + "/bulk", rsyncDir, stDir] { _ = try? Bench.sh("rm -rf '\(dir)'") }
        defer { _ = try? Bench.sh("rm -rf '\(source)' '\(o.dir)/bulk' '\(rsyncDir)' '\(stDir)'; sync") }
        let expected = try makeBulkSource(source, files: o.bulkFiles)
        let megabytes = Double(expected.bytes) / 1e6
        say("  bulk: \(o.bulkFiles) files, \(Bench.f(megabytes, 0)) MB in \(expected.folders.count) folders")

        // vdrive: cp -r into A until B reads every file back identical.
        let driveLeg = { try withPair(o, "bulk", removeAfter: false) { workspace, a, b -> Transfer in
            let copy = "cp -r '\(source)' '\(a.path("bulk"))'"
            let offset = workspace.accessLogOffset
            var t = Transfer(seconds: 0, sendSeconds: 0, processCPU: 0, machineCPU: 0)
            let pids = [a.pid, b.pid, workspace.server.pid]
            let timeline = o.timeline ? RequestTimeline(workspace: workspace, from: offset, pids: pids) : nil
            let transfer = { t = try timedTransfer(expected: expected, receiver: b.path("bulk"), pids: pids, timeline: timeline?.sample) { try Bench.sh(copy) } }
            if let perf = o.perf {
                try Bench.profile(pid: a.pid, into: perf + "-a") {
                    try Bench.profile(pid: b.pid, into: perf + "-b") { try Bench.profile(pid: workspace.server.pid, into: perf + "-server", during: transfer) }
                }
                say("  profiles of the copy: \(perf)-a.txt, \(perf)-b.txt, \(perf)-server.txt")
            } else {
                try transfer()
            }
            printRequests(workspace.accessLines(from: offset))
            say("  vdrive: cp into A \(Bench.f(t.sendSeconds)) s, all identical on B after \(Bench.f(t.seconds)) s; CPU s: mounts and server \(Bench.f(t.processCPU)) "
                + "(A \(Bench.f(t.eachCPU[0])), B \(Bench.f(t.eachCPU[1])), server \(Bench.f(t.eachCPU[2]))), machine \(Bench.f(t.machineCPU))")
            return t
        } }

        // rsync -a to an rsync daemon on loopback.
        let rsyncLeg = { (folder: String) throws -> Transfer in
            let daemon = try RsyncDaemon(dir: rsyncDir)
            defer { daemon.stop() }
            let copy = "rsync -a '\(source)/' \(daemon.url)\(folder)/"
            let t = try timedTransfer(expected: expected, receiver: daemon.module + "/" + folder, pids: []) { try Bench.sh(copy) }
            say("  rsync -a to rsync --daemon: \(Bench.f(t.sendSeconds)) s, checked after \(Bench.f(t.seconds)) s; machine CPU s \(Bench.f(t.machineCPU))")
            return t
        }

        // Two Syncthing instances: cp -r into one until the other has every file.
        var syncthingProblem: String?
        let syncthingLeg = { () -> Transfer? in
            do {
                let pair = try SyncthingPair(dir: stDir)
                defer { pair.stop() }
                let copy = "cp -r '\(source)' '\(pair.a.folder)/bulk'"
                let t = try timedTransfer(expected: expected, receiver: pair.b.folder + "/bulk", pids: pair.pids) { try Bench.sh(copy) }
                say("  Syncthing: cp into A \(Bench.f(t.sendSeconds)) s, all identical on B after \(Bench.f(t.seconds)) s; CPU s: both instances \(Bench.f(t.processCPU)), machine \(Bench.f(t.machineCPU))")
                return t
            } catch {
                syncthingProblem = "\(error)"
                say("  Syncthing could not be measured: \(error)")
                return nil
            }
        }

        // Each leg leaves its files in the page cache, so a later leg finds fewer pages the
        // machine has touched lately (see Docs/benchmarks.md, "Bulk: pages touched for the first
        // time"): `--anchors-first` runs Syncthing and rsync before the drive.
        let drive: Transfer, firstRsync: Transfer, syncthing: Transfer?
        if o.anchorsFirst {
            syncthing = syncthingLeg(); try Bench.sh("sync")
            firstRsync = try rsyncLeg("bulk"); try Bench.sh("sync")
            drive = try driveLeg()
        } else {
            drive = try driveLeg(); try Bench.sh("sync")
            firstRsync = try rsyncLeg("bulk"); try Bench.sh("sync")
            syncthing = syncthingLeg()
        }
        // rsync again, last (nothing after it pays for its pages), and the faster of the
        // two is the anchor: ext4 steps over inodes freed in the last minutes (an earlier
        // run's files), which made one rsync take 4 s instead of 0.8-1.5 s, and a slow
        // anchor would say the target is met when it is not.
        try Bench.sh("sync")
        let secondRsync = try rsyncLeg("bulk-again")
        let rsync = secondRsync.seconds < firstRsync.seconds ? secondRsync : firstRsync
        let rsyncRuns = "the faster of \(Bench.f(firstRsync.seconds)) and \(Bench.f(secondRsync.seconds)) s"

        let files = "\(o.bulkFiles) files, \(Bench.f(megabytes, 0)) MB"
        var rows = [
            Row(figure: "bulk: \(files) into A until identical on B", vdrive: "\(Bench.f(drive.seconds)) s (cp \(Bench.f(drive.sendSeconds)) s)",
                anchor: "rsync -a to rsync --daemon: \(Bench.f(rsync.seconds)) s (\(rsyncRuns))", target: "≤ 3x rsync",
                met: "\(Bench.f(drive.seconds / rsync.seconds))x: " + met(drive.seconds <= 3 * rsync.seconds)),
        ]
        if let syncthing {
            rows.append(Row(figure: "  against Syncthing", vdrive: "\(Bench.f(drive.seconds)) s",
                            anchor: "Syncthing, cp into A until identical on B: \(Bench.f(syncthing.seconds)) s", target: "≤ 0.5x Syncthing",
                            met: "\(Bench.f(drive.seconds / syncthing.seconds))x: " + met(drive.seconds <= 0.5 * syncthing.seconds)))
        } else {
            rows.append(Row(figure: "  against Syncthing", vdrive: "\(Bench.f(drive.seconds)) s", anchor: "not measured: \(syncthingProblem ?? "?")",
                            target: "≤ 0.5x Syncthing", met: "not measured"))
        }
        rows.append(Row(figure: "  CPU s: the processes (mounts + server / Syncthings), the machine",
                        vdrive: "\(Bench.f(drive.processCPU)), \(Bench.f(drive.machineCPU))",
                        anchor: "rsync: -, \(Bench.f(rsync.machineCPU)); Syncthing: " + (syncthing.map { "\(Bench.f($0.processCPU)), \(Bench.f($0.machineCPU))" } ?? "-")))
        return rows
    }

    static func idle(_ o: Options) throws -> [Row] {
        try withPair(o, "idle") { workspace, a, b in
            // Something to mirror, synced both ways, then quiet.
            try FileManager.default.createDirectory(atPath: a.path("notes"), withIntermediateDirectories: false)
            for i in 0..<10 { try writeWhole(a.path("notes/n\(i).txt"), randomBytes(2048, seed: UInt64(500 + i))) }
            try writeWhole(b.path("from-b.txt"), Array("made on B".utf8))
            try waitFor("the files on both devices", seconds: 60, devices: [a, b]) {
                FileManager.default.fileExists(atPath: b.path("notes/n9.txt")) && FileManager.default.fileExists(atPath: a.path("from-b.txt"))
            }
            sleep(5)
            let offset = workspace.accessLogOffset
            let cpu0 = [a.cpuSeconds(), b.cpuSeconds(), workspace.server.cpuSeconds()]
            let start = Bench.now()
            say("  idle: \(o.idleSeconds) s with both devices mounted ...")
            while Bench.now() - start < Double(o.idleSeconds) {
                sleep(UInt32(min(60, max(1, Double(o.idleSeconds) - (Bench.now() - start)))))
                if Bench.now() - start < Double(o.idleSeconds) { say("  idle: \(Int(Bench.now() - start)) s") }
            }
            let seconds = Bench.now() - start
            let cpu1 = [a.cpuSeconds(), b.cpuSeconds(), workspace.server.cpuSeconds()]
            let share = zip(cpu1, cpu0).map { ($0 - $1) / seconds * 100 }
            let lines = workspace.accessLines(from: offset)
            var perDevice: [String: Int] = [:], perRoute: [String: Int] = [:]
            for line in lines {
                let fields = logfmt(line)
                let device = fields["device"] ?? "-"
                perDevice[device, default: 0] += 1
                // A line without a request: a connection closed idle (its `end` says how).
                let what = fields["method"] == "-" ? "no request, \(fields["end"] ?? "?")" : "\(fields["method"] ?? "?") \(fields["route"] ?? "?")"
                perRoute["\(device == "-" ? "no device" : device) \(what)", default: 0] += 1
            }
            let periods = seconds / 30
            let rate = [a, b].map { Double(perDevice[$0.name] ?? 0) / periods }
            say("  idle \(Int(seconds)) s: CPU % of a core: A \(Bench.f(share[0], 3)), B \(Bench.f(share[1], 3)), server \(Bench.f(share[2], 3))")
            for (route, n) in perRoute.sorted(by: { $0.key < $1.key }) { say("    \(n) × \(route)") }
            return [
                Row(figure: "idle, \(Int(seconds)) s, two synced mounts: CPU of each mount (% of a core)", vdrive: "A \(Bench.f(share[0], 3)), B \(Bench.f(share[1], 3))",
                    anchor: "server \(Bench.f(share[2], 3))", target: "≤ 0.1 %", met: met(share[0] <= 0.1 && share[1] <= 0.1)),
                Row(figure: "  requests per device per 30 s", vdrive: "A \(Bench.f(rate[0])), B \(Bench.f(rate[1]))",
                    anchor: perRoute.sorted(by: { $0.key < $1.key }).map { "\($0.value) \($0.key)" }.joined(separator: "; "),
                    target: "≤ 1", met: met(rate.allSatisfy { $0 <= 1 })),
            ]
        }
    }

    static func storm(_ o: Options) throws -> [Row] {
        try withPair(o, "storm") { workspace, a, b in
            let count = 100
            try FileManager.default.createDirectory(atPath: a.path("storm"), withIntermediateDirectories: false)
            for f in 0..<count { try writeWhole(a.path("storm/s\(f).txt"), StormWrite(device: "start", file: f, n: 0).bytes) }
            try waitFor("the storm's files on B", seconds: 120, devices: [a, b]) {
                ((try? FileManager.default.contentsOfDirectory(atPath: b.path("storm"))) ?? []).count == count
            }
            say("  storm: both devices rewriting the same \(count) files for \(o.stormSeconds) s, one write every 10 ms each ...")
            let logs = [StormLog(), StormLog()]
            let devices = [a, b]
            let (names, roots) = (devices.map(\.name), devices.map(\.mountPoint))
            let end = Bench.now() + Double(o.stormSeconds)
            Bench.onThreads(2) { d in
                var n = 0
                while Bench.now() < end {
                    let f = (n + d * 50) % count
                    n += 1
                    let write = StormWrite(device: names[d], file: f, n: n)
                    do {
                        try writeWhole(roots[d] + "/storm/s\(f).txt", write.bytes)
                        logs[d].add(write, closed: Bench.now())
                    } catch {
                        logs[d].fail("\(error)")
                    }
                    usleep(10_000)
                }
            }
            let stopped = Bench.now()
            for (d, log) in zip(devices, logs) { if let problem = log.problem { say("  storm: a write on \(d.name) failed: \(problem)") } }
            say("  storm: \(logs[0].writes.count) writes on A, \(logs[1].writes.count) on B; waiting for the same tree on both ...")
            let tree = try waitForSameTree([a, b], folder: "storm", seconds: 900)
            let settled = Bench.now() - stopped

            // What is there: the 100 names, conflict copies, every content one the devices wrote.
            let copies = tree.keys.filter { $0.contains(" (conflict from ") }
            let missing = (0..<count).filter { tree["s\($0).txt"] == nil }
            var written: [String: StormWrite] = [:]
            for log in logs { for w in log.writes { written[w.hash] = w.write } }
            for f in 0..<count { written[StormWrite(device: "start", file: f, n: 0).hash] = StormWrite(device: "start", file: f, n: 0) }
            let foreign = tree.filter { written[$0.value] == nil }.keys.sorted()
            // The last write of each device to each file stays (as the file or a conflict
            // copy) unless the other device wrote that file after it.
            let present = Set(tree.values)
            var lost: [String] = []
            for f in 0..<count {
                let last = logs.map { $0.last(file: f) }
                for d in 0..<2 {
                    guard let mine = last[d] else { continue }
                    let otherLater = (last[1 - d]?.closed ?? 0) > mine.closed
                    if !present.contains(mine.hash) && !otherLater { lost.append("s\(f).txt: \(devices[d].name)'s write \(mine.write.n)") }
                }
            }
            let serverRSS = Bench.peakRSS(pid: workspace.server.pid) ?? 0
            let serverNow = Double(RSSSampler(pid: workspace.server.pid).sample()) / 1024
            let records = Double(workspace.recordsBytes) / 1e6
            let catalogs = [a, b].map { Double($0.catalogBytes) / 1e6 }
            say("  storm: same tree \(Bench.f(settled, 1)) s after the writes stopped; \(tree.count) files, \(copies.count) conflict copies; "
                + "missing \(missing.count), unknown contents \(foreign.count), lost last writes \(lost.count)")
            for l in lost.prefix(10) { say("    lost: \(l)") }
            for f in foreign.prefix(10) { say("    unknown content: \(f)") }
            say("  storm: server RSS \(Bench.f(serverNow, 1)) MB (peak \(Bench.f(serverRSS, 1))), records \(Bench.f(records, 1)) MB; catalogs A \(Bench.f(catalogs[0], 1)) MB, B \(Bench.f(catalogs[1], 1)) MB")
            let intact = missing.isEmpty && foreign.isEmpty && lost.isEmpty
            return [
                Row(figure: "storm: A and B rewriting the same \(count) files for \(o.stormSeconds) s (\(logs[0].writes.count) + \(logs[1].writes.count) writes)",
                    vdrive: "same tree \(Bench.f(settled, 1)) s after; \(count - missing.count) of \(count) files, \(copies.count) conflict copies",
                    target: "identical, nothing lost", met: met(intact)),
                Row(figure: "  lost: missing files, unknown contents, last writes gone", vdrive: "\(missing.count), \(foreign.count), \(lost.count)"),
                Row(figure: "  server RSS (peak); records; catalogs A, B", vdrive: "\(Bench.f(serverNow, 1)) MB (\(Bench.f(serverRSS, 1))); \(Bench.f(records, 1)) MB; \(Bench.f(catalogs[0], 1)), \(Bench.f(catalogs[1], 1)) MB"),
            ]
        }
    }

    static func firstMount(_ o: Options) throws -> [Row] {
        let workspace = try SyncWorkspace(vdrive: o.vdrive, dir: o.dir + "/first-mount")
        defer {
            workspace.stop()
            _ = try? Bench.sh("rm -rf '\(workspace.dir)'")
        }
        let seedStart = Bench.now()
        let seeded = try seed(workspace, files: o.files)
        say("  first mount: \(o.files) files in \(seeded.folders) folders put on the server in \(Bench.f(Bench.now() - seedStart, 1)) s")

        let offset = workspace.accessLogOffset
        let start = Bench.now()
        let device = try workspace.mount("new-device")
        let sampler = RSSSampler(pid: device.pid)
        sampler.start()
        let mounted = Bench.now() - start
        let last = device.path(seeded.last)
        var appeared = 0.0, listing = 0.0, listed = 0
        let deadline = start + 3600
        while Bench.now() < deadline {
            if appeared == 0 {
                if access(last, F_OK) == 0 { appeared = Bench.now() - start } else { usleep(100_000); continue }
            }
            let ls = Bench.now()
            listed = try countListing(device.mountPoint, under: "many")
            listing = Bench.now() - ls
            say("  first mount: ls -R listed \(listed) of \(seeded.entries) entries in \(Bench.f(listing, 2)) s")
            if listed >= seeded.entries { break }
            sleep(1)
        }
        let total = Bench.now() - start
        let peak = Double(sampler.stop()) / 1024
        let cpu = device.cpuSeconds()
        let requests = workspace.accessLines(from: offset).filter { logfmt($0)["device"] == "new-device" }.count
        guard listed >= seeded.entries else { throw Bench.Failure(description: "the new device listed \(listed) of \(seeded.entries) entries within an hour; its log: \(device.log)") }
        say("  first mount: mounted in \(Bench.f(mounted, 2)) s, last file there after \(Bench.f(appeared, 1)) s, ls -R complete after \(Bench.f(total, 1)) s (the last ls -R \(Bench.f(listing, 2)) s); "
            + "peak RSS \(Bench.f(peak, 1)) MB, CPU \(Bench.f(cpu, 1)) s, \(requests) requests")
        return [
            Row(figure: "first mount of a workspace of \(o.files) files: until ls -R lists them all", vdrive: "\(Bench.f(total, 1)) s (last ls -R \(Bench.f(listing, 2)) s)",
                anchor: "\(requests) requests, mount CPU \(Bench.f(cpu, 1)) s"),
            Row(figure: "  that mount's peak RSS", vdrive: "\(Bench.f(peak, 1)) MB", target: "≤ 100 MB", met: met(peak <= 100)),
        ]
    }

    // MARK: - Helpers

    /// Requests by device and route, with the time the server spent on them.
    static func printRequests(_ lines: [Substring]) {
        var count: [String: Int] = [:], milliseconds: [String: Double] = [:]
        for line in lines {
            let f = logfmt(line)
            guard let key = requestKey(f) else { continue }
            count[key, default: 0] += 1
            milliseconds[key, default: 0] += Double(f["ms"] ?? "0") ?? 0
        }
        for (key, n) in count.sorted(by: { $0.key < $1.key }) {
            say("    \(n) × \(key): \(Bench.f(milliseconds[key] ?? 0, 0)) ms in the server")
        }
    }

    /// The bulk row's `--timeline`: each sample reads the access log's new lines (from
    /// where the last one stopped) and says, on one line, the time, the files identical on
    /// B, the CPU seconds of each process so far, and the requests finished by device and
    /// route (held tree requests left out: they end only when answered).
    final class RequestTimeline {
        private let workspace: SyncWorkspace
        private let pids: [pid_t]
        private let cpu0: [Double]
        private var offset: UInt64
        private var finished: [String: Int] = [:]

        init(workspace: SyncWorkspace, from offset: UInt64, pids: [pid_t]) {
            self.workspace = workspace
            self.pids = pids
            self.offset = offset
            cpu0 = pids.map(treeCPUSeconds)
        }

        func sample(_ seconds: Double, _ identical: Int) {
            for line in workspace.accessLines(after: &offset) {
                let f = logfmt(line)
                guard let key = requestKey(f), f["route"] != "/v1/tree" || f["method"] != "GET" else { continue }
                finished[key, default: 0] += 1
            }
            let cpu = zip(pids, cpu0).map { Bench.f(treeCPUSeconds($0) - $1) }.joined(separator: " ")
            let requests = finished.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ")
            say("    at \(Bench.f(seconds, 1)) s: \(identical) identical; CPU s A B server \(cpu); \(requests)")
        }
    }

    /// An access log line's `device method route`; nil for a connection that sent no request.
    static func requestKey(_ f: [String: String]) -> String? {
        guard f["method"] != "-" else { return nil }
        return "\(f["device"] ?? "-") \(f["method"] ?? "?") \(f["route"] ?? "?")"
    }

    static func ms(_ seconds: Double) -> String { Bench.f(seconds * 1000, 0) + " ms" }
    static func met(_ ok: Bool) -> String { ok ? "met" : "not met" }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
    }

    /// `key=value` pairs of an access log line.
    static func logfmt(_ line: Substring) -> [String: String] {
        var out: [String: String] = [:]
        for pair in line.split(separator: " ") {
            guard let eq = pair.firstIndex(of: "=") else { continue }
            out[String(pair[..<eq])] = String(pair[pair.index(after: eq)...])
        }
        return out
    }

    /// Writes a whole file (created or truncated) and closes it.
    static func writeWhole(_ path: String, _ bytes: [UInt8]) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw Bench.Failure(description: "cannot open \(path) for writing: errno \(errno)") }
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { close(fd); throw Bench.Failure(description: "write to \(path) failed: errno \(errno)") }
            done += n
        }
        guard close(fd) == 0 else { throw Bench.Failure(description: "close of \(path) failed: errno \(errno)") }
    }

    /// A whole file's bytes, nil when it cannot be opened or read.
    static func readWhole(_ path: String, limit: Int = 1 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while out.count <= limit {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return out }
            out += buffer[0..<n]
        }
        return out
    }

    /// Polls `path` every 2 ms until it reads as `bytes`; returns when it did.
    static func waitForBytes(_ path: String, _ bytes: [UInt8], seconds: Double) throws -> Double {
        let deadline = Bench.now() + seconds
        while Bench.now() < deadline {
            if readWhole(path, limit: bytes.count + 1) == bytes { return Bench.now() }
            usleep(2_000)
        }
        throw Bench.Failure(description: "\(path) did not read as the bytes written on the other device within \(Int(seconds)) s")
    }

    /// Polls `condition` every 50 ms; on a timeout the error names the devices' logs.
    static func waitFor(_ what: String, seconds: Double, devices: [SyncDevice], _ condition: () -> Bool) throws {
        let deadline = Bench.now() + seconds
        while Bench.now() < deadline {
            if condition() { return }
            usleep(50_000)
        }
        for d in devices { say("--- \(d.name)'s log (\(d.log)):\n\(d.logTail())") }
        throw Bench.Failure(description: "\(what): not within \(Int(seconds)) s")
    }

    /// A folder's files on every device (name → SHA-256 of the bytes), once they are the
    /// same on all and stayed so for a second.
    static func waitForSameTree(_ devices: [SyncDevice], folder: String, seconds: Double) throws -> [String: String] {
        let deadline = Bench.now() + seconds
        var previous: [String: String]?
        while Bench.now() < deadline {
            let trees = devices.map { d -> [String: String] in
                var out: [String: String] = [:]
                for name in (try? FileManager.default.contentsOfDirectory(atPath: d.path(folder))) ?? [] {
                    if let bytes = readWhole(d.path(folder + "/" + name)) { out[name] = SHA256Hasher.digest(bytes).hex }
                }
                return out
            }
            if trees.dropFirst().allSatisfy({ $0 == trees[0] }) {
                if previous == trees[0] { return trees[0] }
                previous = trees[0]
            } else {
                previous = nil
            }
            sleep(1)
        }
        for d in devices { say("--- \(d.name)'s log (\(d.log)):\n\(d.logTail())") }
        throw Bench.Failure(description: "the devices' \(folder)/ did not become the same within \(Int(seconds)) s")
    }
}

/// One write of the storm: its bytes say who wrote it, to which file, and which write
/// it was, so any content found afterwards can be told apart from garbage.
struct StormWrite: Sendable {
    let device: String
    let file: Int
    let n: Int

    var bytes: [UInt8] {
        let header = Array("vdrive-bench storm: \(device) file \(file) write \(n)\n".utf8)
        var out = header
        while out.count < 2048 { out += header }
        return Array(out.prefix(2048))
    }

    var hash: String { SHA256Hasher.digest(bytes).hex }
}

/// The writes one device made in the storm, in order. `@unchecked Sendable`: guarded by `lock`.
final class StormLog: @unchecked Sendable {
    struct Entry { let write: StormWrite; let hash: String; let closed: Double }
    private let lock = NSLock()
    private var entries: [Entry] = []
    private var failure: String?

    func add(_ w: StormWrite, closed: Double) { let e = Entry(write: w, hash: w.hash, closed: closed); lock.withLock { entries.append(e) } }
    func fail(_ text: String) { lock.withLock { if failure == nil { failure = text } } }
    var writes: [Entry] { lock.withLock { entries } }
    var problem: String? { lock.withLock { failure } }
    func last(file: Int) -> Entry? { lock.withLock { entries.last { $0.write.file == file } } }
}
