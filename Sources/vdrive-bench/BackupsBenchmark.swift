import Foundation
import Crypto
import Drive
import Storage

/// `vdrive-bench backups`: the cost of `Backups/` for a workspace with many records,
/// in process: learning them (the feed applied to the records table, pages of 5,000,
/// with the tree's rows), a change of one file (what the mount does each time the feed
/// brings one), listing a month, lookups, and the memory reading the tree takes.
/// Records: two devices, dates over ten years, one file in ten with an older version.
enum BackupsBenchmark {
    static let usage = "       vdrive-bench backups [--records N] [--dir DIR]"

    static func run(_ arguments: [String]) throws {
        var records = 100_000
        var dir = "/var/tmp/vdrive-bench-backups"
        try Bench.parseOptions(arguments, values: [
            "--records": { records = try Bench.count($0) },
            "--dir": { dir = $0 },
        ])
        try? FileManager.default.removeItem(atPath: dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let fs = try DriveFileSystem(statePath: dir + "/state")
        _ = try fs.recover()
        let table = try RecordsTable(catalogPath: fs.catalogPath)
        let tree = try BackupsTree(table: table)

        var sequence: Int64 = 0
        func version(_ k: Int, _ generation: Int) -> RemoteVersion {
            sequence += 1
            return RemoteVersion(sequence: sequence, device: k % 2 == 0 ? "phone" : "laptop", path: "Camera Roll/IMG_\(k).jpg",
                                 content: SHA256Hasher.digest(Array("\(k)-\(generation)".utf8)), size: 3_000_000,
                                 captureDate: 1_450_000_000 + Int64(k) * 3_150, mtime: 1_450_000_000, recordedAt: 1_700_000_000 + sequence)
        }
        var all: [RemoteChange] = []
        for k in 0..<records {
            all.append(.recorded(version(k, 0)))
            if k % 10 == 0 { all.append(.recorded(version(k, 1))) }
        }
        let apply = try Bench.time {
            for start in stride(from: 0, to: all.count, by: 5_000) {
                let page = Array(all[start..<min(all.count, start + 5_000)])
                try table.apply(RemoteChangePage(changes: page, nextSequence: page.last!.sequence))
            }
        }
        DaemonTuning.returnFreedMemory()   // what learning freed goes back: the figure is what reading the tree adds
        let rssBefore = residentMB()
        // One new version of one file: the feed page with the file's rows placed again.
        var updates: [Double] = []
        for round in 0..<20 {
            let change = version(round * 7, 2 + round)
            updates.append(try Bench.time {
                try table.apply(RemoteChangePage(changes: [.recorded(change)], nextSequence: change.sequence))
            })
        }
        // Every file of the phone's months, listed as readdirplus pages do (100 a page), then looked up.
        var files: [String] = []
        let listing = Bench.time {
            for year in (tree.entries(in: "phone") ?? []).map({ "phone/" + $0.name }) {
                for month in (tree.entries(in: year) ?? []).map({ year + "/" + $0.name }) {
                    var cookie: Int64 = 0
                    while let page = tree.listing(of: month, after: cookie, limit: 100), let last = page.last {
                        files += page.filter { !$0.item.isFolder }.map { month + "/" + $0.name }
                        cookie = last.cookie
                    }
                }
            }
        }
        let lookups = min(200_000, files.count * 4)
        let lookup = Bench.time {
            for n in 0..<lookups { _ = tree.item(at: files[n % files.count]) }
        }
        let rssAfter = residentMB()
        updates.sort()
        print("Backups/ with \(records) files (\(all.count) versions), debug or release as built:")
        print(String(format: "  learn: feed applied to the records table   %8.2f s  (%.0f versions/s)", apply, Double(all.count) / apply))
        print(String(format: "  one file changed: page applied with its rows %6.2f ms median, %.2f ms max (20 changes)", updates[10] * 1000, updates[19] * 1000))
        print(String(format: "  list the phone's %d files, 100 a page       %8.2f s  (%.1f µs a file)", files.count, listing, listing / Double(max(1, files.count)) * 1e6))
        print(String(format: "  lookup (item at a path)                    %8.2f µs", lookup / Double(lookups) * 1e6))
        print(String(format: "  resident memory of reading the tree        %8.0f MB (VmRSS %.0f before, %.0f after)",
                     rssAfter - rssBefore, rssBefore, rssAfter))
    }

    static func residentMB() -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            return (line.split(separator: " ").compactMap { Double($0) }.first ?? 0) / 1024
        }
        return 0
    }
}
