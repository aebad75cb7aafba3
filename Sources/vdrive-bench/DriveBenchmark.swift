import Foundation

/// `vdrive-bench drive [options]` (see `usage`)
///
/// Side by side, in one run, on the same disk, row by row (every target does a row
/// before the next row starts): a plain folder; FUSE passthroughs as references
/// (bindfs `-o big_writes` from Debian; libfuse's `passthrough_hp` and `passthrough_ll`
/// examples, built by scripts/build-libfuse-examples.sh); and the drive (release build,
/// hashing included). The rows are what a drive of blocks must do well: small changes to a 1 GiB file,
/// a sparse 2 GiB file, sequential copies, `tar x` of many small files, and xfstests'
/// fsstress. Every command has a deadline: a row that stalls prints "timeout after N s"
/// and the run goes on; every mount is unmounted on every path.
/// `--baseline-vdrive PATH` adds another build of the drive as a last column: on these
/// noisy machines a change is judged by its column beside the build before it, in the
/// same rows, not by two runs minutes apart.
enum DriveBenchmark {
    static let usage = """
        usage: vdrive-bench drive [--dir DIR] [--big-mib N] [--files N] [--list N] [--tree DIR] [--rounds N]
                                  [--libfuse DIR] [--fsstress PATH] [--fsstress-procs N] [--fsstress-ops N] [--seed N]
                                  [--timeout S] [--fsstress-timeout S] [--only plain,bindfs,hp,ll,vdrive,baseline]
                                  [--rows copy,small,sparse,many,list,tar,fsstress] [--baseline-vdrive PATH]
        """

    struct Options {
        var dir = "/var/tmp/vdrive-bench"
        var bigMiB = 1024, files = 1000, listCount = 10_000, rounds = 3
        var tree = "/usr/include"
        var libfuse: String? = nil
        var fsstress: String? = nil
        var fsstressProcs = 4, fsstressOps = 1000, seed = 42
        var timeout = 120.0, fsstressTimeout = 300.0
        var only: Set<String>? = nil
        var rows: Set<String>? = nil
        /// Another build of `vdrive`, measured as its own column.
        var baseline: String? = nil
    }

    enum Kind: String { case plain, bindfs, hp, ll, vdrive, baseline }

    /// One column: where the rows write, and what holds its bytes on disk.
    struct Target {
        let kind: Kind
        let name: String
        let path: String
        /// The folder whose size is "the state on disk" (the passthrough's source folder,
        /// the drive's state folder; the plain folder itself).
        let backing: String
        var pid: pid_t?
    }

    static func run(_ args: [String]) throws {
        var o = Options()
        var help = false
        try Bench.parseOptions(args, values: [
            "--dir": { o.dir = $0 },
            "--big-mib": { o.bigMiB = try Bench.count($0) },
            "--files": { o.files = try Bench.count($0) },
            "--list": { o.listCount = try Bench.count($0) },
            "--rounds": { o.rounds = try Bench.count($0) },
            "--tree": { o.tree = $0 },
            "--libfuse": { o.libfuse = $0 },
            "--fsstress": { o.fsstress = $0 },
            "--fsstress-procs": { o.fsstressProcs = try Bench.count($0) },
            "--fsstress-ops": { o.fsstressOps = try Bench.count($0) },
            "--seed": { o.seed = try Bench.count($0) },
            "--timeout": { o.timeout = Double(try Bench.count($0)) },
            "--fsstress-timeout": { o.fsstressTimeout = Double(try Bench.count($0)) },
            "--only": { o.only = Set($0.split(separator: ",").map(String.init)) },
            "--baseline-vdrive": { o.baseline = $0 },
            "--rows": {
                let known: Set<String> = ["copy", "small", "sparse", "many", "list", "tar", "fsstress"]
                let r = Set($0.split(separator: ",").map(String.init))
                guard r.isSubset(of: known) else { throw Bench.BadValue(expected: "some of \(known.sorted().joined(separator: ","))") }
                o.rows = r
            },
        ], flags: ["--help": { help = true }, "-h": { help = true }])
        if help { say(usage); return }
        try Run(o).go()
    }

    final class Run {
        let o: Options
        let d: String
        var targets: [Target] = []
        var rows: [[String]] = []
        var notes: [String] = []

        init(_ o: Options) {
            self.o = o
            d = o.dir
        }

        func wanted(_ k: Kind) -> Bool { o.only.map { $0.contains(k.rawValue) } ?? true }

        /// A command that must work (setup): its failure ends the run.
        func must(_ command: String, timeout: Double = 600) throws {
            let r = TimedCommand.run(command, timeout: timeout, log: d + "/bench.log")
            if !r.succeeded { throw Bench.Failure(description: "\(r.text { _ in "?" }): \(command) (log: \(d)/bench.log)") }
        }

        /// A measured command, with the row's deadline; output in the run's log.
        func timed(_ command: String, timeout: Double? = nil) -> TimedCommand.Outcome {
            TimedCommand.run(command, timeout: timeout ?? o.timeout, log: d + "/bench.log")
        }

        func dropCaches() {
            _ = TimedCommand.run("sync", timeout: 60)
            _ = try? "3\n".write(toFile: "/proc/sys/vm/drop_caches", atomically: false, encoding: .utf8)
        }

        func go() throws {
            BenchMounts.shared.unmountOnSignals()
            defer { BenchMounts.shared.unmountAll() }
            for m in ["bindfs-mnt", "hp-mnt", "ll-mnt", "drive-mnt", "baseline-mnt"] where Bench.isMounted("\(d)/\(m)") {
                _ = TimedCommand.run("fusermount3 -u -z \(d)/\(m)", timeout: 30)
            }
            _ = TimedCommand.run("rm -rf \(d)", timeout: 600)
            try FileManager.default.createDirectory(atPath: d + "/src/many", withIntermediateDirectories: true)
            try prepareSources()
            try startTargets()
            say("Targets: " + targets.map(\.name).joined(separator: ", "))

            // In the order the rows are run; printed in the order of the doc comment below.
            func want(_ row: String) -> Bool { o.rows.map { $0.contains(row) } ?? true }
            if want("copy") || want("small") { bigCopy() }   // the small changes are made to the copied file
            if want("copy") { coldRead() }
            if want("small") { smallChanges() }
            if want("sparse") { sparse() }
            if want("many") { manyCopy() }
            if want("list") { listing() }
            if want("tar") { tarRounds() }
            if want("fsstress") { fsstress() }

            say("")
            say(Bench.table(["drive benchmark"] + targets.map(\.name), rows.sorted { $0[0] < $1[0] }.map { row in
                [String(row[0].drop { $0 != " " }.dropFirst())] + row.dropFirst()
            }))
            for n in notes { say("- " + n) }
            BenchMounts.shared.unmountAll()
            _ = TimedCommand.run("rm -rf \(d)/src \(d)/plain \(d)/bindfs-src \(d)/hp-src \(d)/ll-src \(d)/drive-state \(d)/baseline-state", timeout: 600)
        }

        /// Adds a row; `key` sorts the printed table ("a1 label").
        func row(_ key: String, _ label: String, _ cells: [String]) {
            rows.append(["\(key) \(label)"] + cells)
        }

        func prepareSources() throws {
            say("Preparing sources in \(d)/src: a \(o.bigMiB) MiB file, \(o.files) files of 1 MiB, a tar of \(o.tree) ...")
            try must("head -c \(o.bigMiB)M /dev/urandom > \(d)/src/big.bin")
            try must("head -c 4096 /dev/urandom > \(d)/src/4k.bin")
            try must("for i in $(seq 1 \(o.files)); do head -c 1M /dev/urandom > \(d)/src/many/f$i.bin; done")
            try must("tar cf \(d)/src/tree.tar -C \(URL(fileURLWithPath: o.tree).deletingLastPathComponent().path) \(URL(fileURLWithPath: o.tree).lastPathComponent)")
            let (_, count) = TimedCommand.output("tar tf \(d)/src/tree.tar | wc -l", timeout: 60)
            let (_, size) = TimedCommand.output("du -sm --apparent-size \(o.tree) | cut -f1", timeout: 60)
            notes.append("tar rows: \(o.tree) as one tar file, \(count.trimmingCharacters(in: .whitespacesAndNewlines)) entries, \(size.trimmingCharacters(in: .whitespacesAndNewlines)) MB")
        }

        func libfuseBin() -> String? {
            if let l = o.libfuse { return l }
            let cache = ProcessInfo.processInfo.environment["XDG_CACHE_HOME"] ?? (NSHomeDirectory() + "/.cache")
            return cache + "/vdrive-bench/libfuse/bin"
        }

        func startFuse(_ kind: Kind, _ name: String, _ argv: [String], mount: String, backing: String) {
            do {
                let pid = try TimedCommand.spawn(argv, output: "\(d)/\(kind.rawValue).log")
                try Bench.waitForMount(mount)
                BenchMounts.shared.add(.init(path: mount, pid: pid))
                targets.append(Target(kind: kind, name: name, path: mount, backing: backing, pid: pid))
            } catch {
                notes.append("\(name) left out: \(error) (see \(d)/\(kind.rawValue).log)")
            }
        }

        func startTargets() throws {
            let fm = FileManager.default
            for sub in ["plain", "bindfs-src", "bindfs-mnt", "hp-src", "hp-mnt", "ll-src", "ll-mnt", "drive-mnt", "baseline-mnt"] {
                try fm.createDirectory(atPath: "\(d)/\(sub)", withIntermediateDirectories: true)
            }
            if wanted(.plain) { targets.append(Target(kind: .plain, name: "plain folder", path: "\(d)/plain", backing: "\(d)/plain")) }
            if wanted(.bindfs) {
                if fm.isExecutableFile(atPath: "/usr/bin/bindfs") {
                    startFuse(.bindfs, "bindfs -o big_writes", ["/usr/bin/bindfs", "-f", "-o", "big_writes", "\(d)/bindfs-src", "\(d)/bindfs-mnt"],
                              mount: "\(d)/bindfs-mnt", backing: "\(d)/bindfs-src")
                } else {
                    notes.append("bindfs is not installed (apt-get install bindfs): its column is left out")
                }
            }
            let bin = libfuseBin()
            if wanted(.hp) {
                if let bin, fm.isExecutableFile(atPath: bin + "/passthrough_hp") {
                    startFuse(.hp, "passthrough_hp", [bin + "/passthrough_hp", "--foreground", "\(d)/hp-src", "\(d)/hp-mnt"],
                              mount: "\(d)/hp-mnt", backing: "\(d)/hp-src")
                } else {
                    notes.append("passthrough_hp not found in \(bin ?? "-"): run scripts/build-libfuse-examples.sh or pass --libfuse DIR")
                }
            }
            if wanted(.ll) {
                if let bin, fm.isExecutableFile(atPath: bin + "/passthrough_ll") {
                    startFuse(.ll, "passthrough_ll", [bin + "/passthrough_ll", "-f", "-o", "source=\(d)/ll-src", "\(d)/ll-mnt"],
                              mount: "\(d)/ll-mnt", backing: "\(d)/ll-src")
                } else {
                    notes.append("passthrough_ll not found in \(bin ?? "-"): run scripts/build-libfuse-examples.sh or pass --libfuse DIR")
                }
            }
            if wanted(.vdrive) {
                startFuse(.vdrive, "vdrive", [Bench.sibling("vdrive"), "mount", "\(d)/drive-mnt", "--state", "\(d)/drive-state", "-f"],
                          mount: "\(d)/drive-mnt", backing: "\(d)/drive-state")
            }
            if let baseline = o.baseline, wanted(.baseline) {
                guard fm.isExecutableFile(atPath: baseline) else { throw Bench.Failure(description: "--baseline-vdrive \(baseline): not an executable file") }
                startFuse(.baseline, "vdrive (baseline)", [baseline, "mount", "\(d)/baseline-mnt", "--state", "\(d)/baseline-state", "-f"],
                          mount: "\(d)/baseline-mnt", backing: "\(d)/baseline-state")
            }
            guard !targets.isEmpty else { throw Bench.Failure(description: "no target to measure") }
        }

        /// The time of the reference column `kind` in `values`, if it has one.
        func reference(_ kind: Kind, _ values: [Double?]) -> Double? {
            guard let i = targets.firstIndex(where: { $0.kind == kind }) else { return nil }
            return values[i]
        }

        /// Seconds with ratios to the plain folder and to a FUSE reference.
        func secondsRow(_ key: String, _ label: String, _ outcomes: [TimedCommand.Outcome], versus ref: Kind) {
            let secs = outcomes.map { $0.succeeded ? $0.seconds : nil }
            let plain = reference(.plain, secs) ?? nil, r = reference(ref, secs) ?? nil
            let refName = ref == .hp ? "hp" : "ll"
            row(key, label, outcomes.enumerated().map { (i, out) in
                out.text { s in
                    var t = Bench.f(s)
                    var ratios: [String] = []
                    if let plain, targets[i].kind != .plain { ratios.append(Bench.f(s / plain) + "x plain") }
                    if let r, targets[i].kind != ref, targets[i].kind != .plain { ratios.append(Bench.f(s / r) + "x " + refName) }
                    if !ratios.isEmpty { t += " (" + ratios.joined(separator: ", ") + ")" }
                    return t
                }
            })
        }

        /// Runs `command(target, n)` `count` times per target; the cell is the median in ms
        /// and the slowest ("12.3 (max 15.0)"), or the first failure or timeout.
        func repeatedRow(_ key: String, _ label: String, count: Int, _ command: (Target, Int) -> String) {
            var cells: [String] = []
            for t in targets {
                var times: [Double] = []
                var failure: String?
                for n in 0..<count {
                    let out = timed(command(t, n))
                    guard out.succeeded, let s = out.seconds else { failure = out.text { _ in "" }; break }
                    times.append(s * 1000)
                }
                if let failure { cells.append(failure); continue }
                times.sort()
                cells.append(Bench.f(times[times.count / 2], 1) + " (max " + Bench.f(times.last!, 1) + ")")
            }
            row(key, label, cells)
        }

        func bigCopy() {
            say("Row: copy a \(o.bigMiB) MiB file + sync ...")
            var outs: [TimedCommand.Outcome] = []
            for t in targets {
                dropCaches()
                _ = timed("cat \(d)/src/big.bin > /dev/null")   // the source in page cache for every target alike
                outs.append(timed("cp \(d)/src/big.bin \(t.path)/big.bin && sync"))
            }
            secondsRow("d1", "(d) copy \(o.bigMiB) MiB file + sync (s)", outs, versus: .hp)
            let mb = Double(o.bigMiB) * 1.048576
            row("d2", "  MB/s", outs.map { $0.seconds.map { Bench.f(mb / $0, 0) } ?? "-" })
        }

        func coldRead() {
            say("Row: read it back cold ...")
            var outs: [TimedCommand.Outcome] = []
            for t in targets {
                dropCaches()
                outs.append(timed("cat \(t.path)/big.bin > /dev/null"))
            }
            let mb = Double(o.bigMiB) * 1.048576
            row("d3", "  read it back cold (MB/s)", outs.map { $0.text { Bench.f(mb / $0, 0) } })
        }

        func smallChanges() {
            say("Row: small changes to the \(o.bigMiB) MiB file ...")
            repeatedRow("a0", "a command that does nothing, for scale (ms, median of 5)", count: 5) { _, _ in "true" }
            repeatedRow("a1", "(a) append one line to the \(o.bigMiB) MiB file (ms, median of 3)", count: 3) { t, n in
                "echo 'one more line \(n)' >> \(t.path)/big.bin"
            }
            repeatedRow("b1", "(b) 4 KiB in-place overwrite in it, dd conv=notrunc (ms, median of 3)", count: 3) { t, n in
                "dd if=\(d)/src/4k.bin of=\(t.path)/big.bin bs=4096 count=1 seek=\(1000 + 20_000 * n) conv=notrunc status=none"
            }
            for t in targets { _ = timed("rm -f \(t.path)/big.bin") }
        }

        func sparse() {
            say("Row: sparse 2 GiB files ...")
            repeatedRow("c1", "(c) truncate -s 2G of a new file (ms, median of 3)", count: 3) { t, n in
                "truncate -s 2G \(t.path)/sparse\(n).bin"
            }
            repeatedRow("c2", "(c) then 1 byte written into its middle (ms, median of 3)", count: 3) { t, n in
                "printf x | dd of=\(t.path)/sparse\(n).bin bs=1 seek=1073741824 conv=notrunc status=none"
            }
            for t in targets { _ = timed("rm -f \(t.path)/sparse*.bin") }
        }

        func manyCopy() {
            say("Row: copy \(o.files) files of 1 MiB + sync ...")
            var outs: [TimedCommand.Outcome] = []
            for t in targets {
                dropCaches()
                _ = timed("cat \(d)/src/many/* > /dev/null")
                outs.append(timed("cp -r \(d)/src/many \(t.path)/many && sync"))
            }
            secondsRow("e1", "(e) cp -r \(o.files) x 1 MiB + sync (s)", outs, versus: .hp)
            row("e2", "  files/s", outs.map { $0.seconds.map { Bench.f(Double(o.files) / $0, 0) } ?? "-" })
            for t in targets { _ = timed("rm -rf \(t.path)/many") }
        }

        func listing() {
            say("Row: ls -l of \(o.listCount) files ...")
            var outs: [TimedCommand.Outcome] = []
            for t in targets {
                _ = timed("mkdir \(t.path)/list && cd \(t.path)/list && seq 1 \(o.listCount) | sed 's/^/file-/' | xargs touch && sync", timeout: o.timeout * 2)
            }
            dropCaches()
            sleep(2)   // let attribute caches expire, so ls -l reaches the file system
            for t in targets { outs.append(timed("ls -l \(t.path)/list > /dev/null")) }
            row("h1", "ls -l of \(o.listCount) files (ms)", outs.map { $0.text { Bench.f($0 * 1000, 0) } })
            for t in targets { _ = timed("rm -rf \(t.path)/list") }
        }

        func tarRounds() {
            say("Row: tar x of \(o.tree) + sync, \(o.rounds) rounds ...")
            var perTarget = [[TimedCommand.Outcome]](repeating: [], count: targets.count)
            var tarErrors = [Int](repeating: 0, count: targets.count)
            for r in 1...o.rounds {
                for (i, t) in targets.enumerated() {
                    dropCaches()
                    _ = timed("cat \(d)/src/tree.tar > /dev/null")
                    let log = "\(d)/tar-\(t.kind.rawValue)-\(r).log"
                    let out = TimedCommand.run("mkdir \(t.path)/tar\(r) && tar xf \(d)/src/tree.tar -C \(t.path)/tar\(r) 2>\(log); s=$?; sync; exit $s",
                                               timeout: o.timeout, log: d + "/bench.log")
                    // tar exits 2 when some entries failed (passthrough_hp refuses utimensat): keep
                    // the time, count the complaints.
                    if case .finished(let status, let s) = out, status >> 8 == 2 {
                        let (_, n) = TimedCommand.output("grep -c . \(log)", timeout: 10)
                        tarErrors[i] += Int(n.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
                        perTarget[i].append(.finished(status: 0, seconds: s))
                    } else {
                        perTarget[i].append(out)
                    }
                    _ = timed("rm -rf \(t.path)/tar\(r)", timeout: o.timeout * 2)
                }
            }
            let medians: [Double?] = perTarget.map { outs in
                let s = outs.compactMap { $0.succeeded ? $0.seconds : nil }.sorted()
                return s.count == outs.count ? s[s.count / 2] : nil
            }
            let ll = reference(.ll, medians) ?? nil
            row("f1", "(f) tar x + sync, \(o.rounds) rounds (s)", perTarget.enumerated().map { i, outs in
                var t = outs.map { $0.text { Bench.f($0) } }.joined(separator: " / ")
                if tarErrors[i] > 0 { t += " (tar: \(tarErrors[i]) errors)" }
                return t
            })
            row("f2", "  median round vs passthrough_ll", medians.map { m in
                guard let m else { return "-" }
                return ll.map { Bench.f(m / $0) + "x" } ?? "-"
            })
        }

        func duBytes(_ path: String, apparent: Bool) -> Int64? {
            let (out, text) = TimedCommand.output("du -s -B1 \(apparent ? "--apparent-size " : "")\(path) | cut -f1", timeout: 120)
            guard out.succeeded else { return nil }
            return Int64(text.trimmingCharacters(in: .whitespacesAndNewlines))
        }

        func fsstress() {
            guard let bin = o.fsstress else {
                notes.append("fsstress row left out: pass --fsstress PATH (xfstests' ltp/fsstress, built by hand: Docs/benchmarks.md)")
                return
            }
            say("Row: fsstress -p \(o.fsstressProcs) -n \(o.fsstressOps) -s \(o.seed) ...")
            var outcome: [String] = [], wall: [String] = [], rss: [String] = [], tree: [String] = [], state: [String] = []
            for t in targets {
                let before = duBytes(t.backing, apparent: false) ?? 0
                if let pid = t.pid { try? "5\n".write(toFile: "/proc/\(pid)/clear_refs", atomically: false, encoding: .utf8) }   // resets VmHWM
                let out = TimedCommand.run("\(bin) -d \(t.path)/fsstress -p \(o.fsstressProcs) -n \(o.fsstressOps) -s \(o.seed)",
                                           timeout: o.fsstressTimeout, log: "\(d)/fsstress-\(t.kind.rawValue).log")
                switch out {
                case .finished(0, let s): outcome.append("completes"); wall.append(Bench.f(s))
                case .finished(let st, let s): outcome.append("fails (\(TimedCommand.describe(st)))"); wall.append(Bench.f(s))
                case .timedOut(let after): outcome.append("timeout after \(Int(after)) s"); wall.append("-")
                }
                // What fsstress complained of (an assertion, EIO), once per distinct line.
                let said = ((try? String(contentsOfFile: "\(d)/fsstress-\(t.kind.rawValue).log", encoding: .utf8)) ?? "")
                    .split(separator: "\n").filter { !$0.hasPrefix("seed = ") }
                var counted: [(Substring, Int)] = []
                for line in said { if let k = counted.firstIndex(where: { $0.0 == line }) { counted[k].1 += 1 } else { counted.append((line, 1)) } }
                for (line, n) in counted.prefix(3) { notes.append("fsstress on \(t.name) printed: \(line)" + (n > 1 ? " (\(n) times)" : "")) }
                rss.append(t.pid.flatMap { Bench.peakRSS(pid: $0) }.map { Bench.f($0, 1) } ?? "-")
                let apparent = duBytes("\(t.path)/fsstress", apparent: true)
                // The drive's st_blocks count its stored blocks (holes excluded), so du of its
                // tree is the data the tree holds, as on the other targets.
                let allocated = duBytes("\(t.path)/fsstress", apparent: false)
                tree.append(apparent.map { Bench.f(Double($0) / 1e6, 1) + (allocated.map { " / " + Bench.f(Double($0) / 1e6, 1) } ?? "") } ?? "du timed out")
                let after = duBytes(t.backing, apparent: false)
                if let after, let held = allocated ?? apparent {
                    let grew = Double(after - before)
                    state.append(Bench.f(grew / 1e6, 1) + (held > 0 ? " (" + Bench.f(grew / Double(held)) + "x)" : ""))
                } else {
                    state.append("du timed out")
                }
            }
            let label = "(g) fsstress \(o.fsstressProcs) procs x \(o.fsstressOps) ops, seed \(o.seed)"
            row("g1", label, outcome)
            row("g2", "  wall time (s)", wall)
            row("g3", "  peak RSS of the FUSE process during it (MB, VmHWM)", rss)
            row("g4", "  tree it left: apparent size / du (MB)", tree)
            row("g5", "  state on disk it added: du (MB, x the tree's du)", state)
            notes.append("fsstress: logs in \(d)/fsstress-*.log; the state's growth is compared with the du of the tree it left (the data it holds)")
        }
    }
}
