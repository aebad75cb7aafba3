import Foundation

/// `vdrive-bench drive [--dir DIR] [--big-mib N] [--files N] [--list N]`
///
/// Side by side, in one run, on the same disk: a plain folder, bindfs (Debian's
/// passthrough FUSE file system, `-o big_writes`) and the drive (release build,
/// hashing included). For each: copy a big file in then `sync`; read it back cold;
/// `cp -r` of many 1 MiB files then `sync`; `ls -l` of a folder of many files;
/// peak RSS of the FUSE process.
enum DriveBenchmark {
    struct Target {
        let name: String
        let path: String
        var pid: Int32?
    }

    struct Figures {
        var bigCopy = 0.0, coldRead = 0.0, manyCopy = 0.0, list = 0.0, rss: Double?
    }

    static func run(_ args: [String]) throws {
        var dir = "/var/tmp/vdrive-bench"
        var bigMiB = 2048, files = 2000, listCount = 10_000
        var i = 0
        while i < args.count {
            switch args[i] {
            case "--dir": dir = args[i + 1]; i += 1
            case "--big-mib": bigMiB = Int(args[i + 1])!; i += 1
            case "--files": files = Int(args[i + 1])!; i += 1
            case "--list": listCount = Int(args[i + 1])!; i += 1
            default: throw Bench.Failure(description: "unknown option \(args[i])")
            }
            i += 1
        }
        let vdrive = Bench.sibling("vdrive")
        try? Bench.sh("fusermount3 -u -z \(dir)/bindfs-mnt 2>/dev/null; fusermount3 -u -z \(dir)/drive-mnt 2>/dev/null; true")
        try Bench.sh("rm -rf \(dir) && mkdir -p \(dir)/src/many \(dir)/plain \(dir)/bindfs-src \(dir)/bindfs-mnt \(dir)/drive-mnt")
        print("Preparing sources in \(dir)/src: \(bigMiB) MiB file, \(files) files of 1 MiB ...")
        try Bench.sh("head -c \(bigMiB)M /dev/urandom > \(dir)/src/big.bin")
        try Bench.sh("head -c 1M /dev/urandom > \(dir)/src/one.bin && for i in $(seq 1 \(files)); do cp \(dir)/src/one.bin \(dir)/src/many/f$i.bin; printf %08d $i | dd of=\(dir)/src/many/f$i.bin bs=1 seek=0 conv=notrunc status=none; done")

        var targets = [Target(name: "plain folder", path: "\(dir)/plain")]
        let bindfs = Process()
        bindfs.executableURL = URL(fileURLWithPath: "/usr/bin/bindfs")
        bindfs.arguments = ["-f", "-o", "big_writes", "\(dir)/bindfs-src", "\(dir)/bindfs-mnt"]
        var haveBindfs = FileManager.default.isExecutableFile(atPath: "/usr/bin/bindfs")
        if haveBindfs {
            try bindfs.run()
            do { try Bench.waitForMount("\(dir)/bindfs-mnt") } catch { haveBindfs = false }
            if haveBindfs { targets.append(Target(name: "bindfs -o big_writes", path: "\(dir)/bindfs-mnt", pid: bindfs.processIdentifier)) }
        } else {
            print("bindfs is not installed (apt-get install bindfs): its column is left out")
        }
        let drive = Process()
        drive.executableURL = URL(fileURLWithPath: vdrive)
        drive.arguments = ["mount", "\(dir)/drive-mnt", "--state", "\(dir)/drive-state", "-f"]
        drive.standardError = FileHandle.nullDevice
        try drive.run()
        try Bench.waitForMount("\(dir)/drive-mnt")
        targets.append(Target(name: "vdrive", path: "\(dir)/drive-mnt", pid: drive.processIdentifier))
        defer {
            _ = try? Bench.sh("fusermount3 -u \(dir)/drive-mnt; fusermount3 -u \(dir)/bindfs-mnt 2>/dev/null; true")
            drive.waitUntilExit()
            if haveBindfs { bindfs.waitUntilExit() }
        }

        var results: [Figures] = []
        for t in targets {
            print("Measuring \(t.name) ...")
            var fig = Figures()
            Bench.dropCaches()
            try Bench.sh("cat \(dir)/src/big.bin > /dev/null")   // source in page cache for every target alike
            fig.bigCopy = try Bench.time { try Bench.sh("cp \(dir)/src/big.bin \(t.path)/big.bin && sync") }
            Bench.dropCaches()
            fig.coldRead = try Bench.time { try Bench.sh("cat \(t.path)/big.bin > /dev/null") }
            try Bench.sh("rm \(t.path)/big.bin && sync")
            Bench.dropCaches()
            try Bench.sh("cat \(dir)/src/many/* > /dev/null")
            fig.manyCopy = try Bench.time { try Bench.sh("cp -r \(dir)/src/many \(t.path)/many && sync") }
            try Bench.sh("rm -rf \(t.path)/many && mkdir \(t.path)/list && cd \(t.path)/list && seq 1 \(listCount) | sed 's/^/file-/' | xargs touch && sync")
            Bench.dropCaches()
            sleep(2)   // let attribute caches expire, so ls -l reaches the file system
            fig.list = try Bench.time { try Bench.sh("ls -l \(t.path)/list > /dev/null") }
            try Bench.sh("rm -rf \(t.path)/list")
            if let pid = t.pid { fig.rss = Bench.peakRSS(pid: pid) }
            results.append(fig)
        }

        let plain = results[0]
        let mb = Double(bigMiB) * 1.048576
        var rows: [[String]] = []
        func row(_ label: String, _ value: (Figures) -> String) { rows.append([label] + results.map(value)) }
        row("copy \(bigMiB) MiB file + sync (s)") { Bench.f($0.bigCopy) + " (" + Bench.f($0.bigCopy / plain.bigCopy) + "x)" }
        row("  MB/s") { Bench.f(mb / $0.bigCopy, 0) }
        row("read it back cold (MB/s)") { Bench.f(mb / $0.coldRead, 0) }
        row("cp -r \(files) x 1 MiB + sync (s)") { Bench.f($0.manyCopy) + " (" + Bench.f($0.manyCopy / plain.manyCopy) + "x)" }
        row("  files/s") { Bench.f(Double(files) / $0.manyCopy, 0) }
        row("ls -l of \(listCount) files (ms)") { Bench.f($0.list * 1000, 0) }
        row("peak RSS of the FUSE process (MB)") { $0.rss.map { Bench.f($0, 1) } ?? "-" }
        print("")
        print(Bench.table(["drive benchmark"] + targets.map(\.name), rows))
        try? Bench.sh("rm -rf \(dir)/src \(dir)/plain \(dir)/bindfs-src")
    }
}
