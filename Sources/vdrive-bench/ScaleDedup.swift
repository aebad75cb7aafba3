import Client
import Crypto
import Foundation
import Storage
import TestSupport

/// `vdrive-bench scale --section dedup`: the dedup check (POST /v1/contents/present) of
/// 10,000 hashes, half of them present, against a server whose records hold 1,000,000
/// contents, SQLite and PostgreSQL side by side, through a real `vdrive serve` each;
/// and each server's peak RSS after the checks, also under 4 concurrent checkers.
/// The rows are made fast: PostgreSQL by `generate_series` in one INSERT, SQLite by one
/// prepared INSERT in one transaction; both hold the same hashes (SHA-256 of the row
/// number as 8 big-endian bytes: PostgreSQL's `sha256(int8send(n))`).
enum ScaleDedup {
    static let usage = "       vdrive-bench scale --section dedup [--rows N] [--check N] [--repeat N] [--dir DIR] [--vdrive PATH]"

    /// True when the arguments ask for this section (main.swift dispatches on it).
    static func isSelected(_ arguments: [String]) -> Bool {
        zip(arguments, arguments.dropFirst()).contains { $0 == "--section" && $1 == "dedup" }
    }

    static func run(_ arguments: [String]) throws {
        var rows = 1_000_000, check = 10_000, rounds = 7
        var dir = NSTemporaryDirectory() + "vdrive-bench-dedup-\(getpid())"
        var vdrive = Bench.sibling("vdrive")
        try Bench.parseOptions(arguments, values: [
            "--section": { _ in }, "--rows": { rows = try Bench.count($0) }, "--check": { check = try Bench.count($0) },
            "--repeat": { rounds = try Bench.count($0) }, "--dir": { dir = $0 }, "--vdrive": { vdrive = $0 },
        ])
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        print("dedup check of \(check) hashes (half present) against \(rows) contents; \(rounds) rounds after one warm-up; vdrive serve per back end")
        var table: [[String]] = []
        for backend in ["SQLite", "PostgreSQL"] {
            table.append(try measure(backend: backend, rows: rows, check: check, rounds: rounds, dir: dir + "/" + backend, vdrive: vdrive))
        }
        print(Bench.table(["records", "fill rows s", "check ms median", "min", "max", "4 checkers ms median", "server peak RSS MB", "RssAnon MB", "RssFile MB"], table))
    }

    static func hash(_ n: Int) -> String {
        var bigEndian = UInt64(n).bigEndian
        return withUnsafeBytes(of: &bigEndian) { SHA256Hasher.digest(Array($0)).hex }
    }

    private static func measure(backend: String, rows: Int, check: Int, rounds: Int, dir: String, vdrive: String) throws -> [String] {
        let data = dir + "/data"
        var extra: [String] = []
        var cluster: PostgresCluster?
        var databaseName = ""
        if backend == "PostgreSQL" {
            guard let shared = PostgresCluster.shared else { throw BenchError("the PostgreSQL cluster did not start (apt-get install postgresql)") }
            cluster = shared
            let url = try shared.newDatabase()
            databaseName = PostgresCluster.databaseName(of: url)
            extra = ["--database", url]
        }
        // Adding the device makes the schema.
        let added = try runCommand(vdrive, ["serve", "device", "add", "bench", "--data", data] + extra)
        guard added.status == 0, let token = added.stdout.split(separator: "\n").first.map(String.init) else { throw BenchError("device add: \(added.stderr)") }

        let fill = try Bench.time {
            if let cluster {
                try cluster.psql(databaseName, """
                    INSERT INTO contents(hash, size, blocks, created_at)
                    SELECT encode(sha256(int8send(g)), 'hex'), 1, '[]', 0 FROM generate_series(1, \(rows)) g
                    """)
                try cluster.psql(databaseName, "VACUUM ANALYZE contents")
            } else {
                let db = try Database(path: data + "/server.db")
                try db.transaction {
                    for n in 1...rows { try db.run("INSERT INTO contents(hash, size, blocks, created_at) VALUES (?, 1, '[]', 0)", hash(n)) }
                }
            }
        }

        let server = try RunningServer(vdrive: vdrive, data: data, extra: extra)
        defer { server.stop() }
        var random = SystemRandomNumberGenerator()
        let present = (0..<check / 2).map { _ in hash(Int.random(in: 1...rows, using: &random)) }
        let absent = (0..<(check - check / 2)).map { _ in hash(rows + Int.random(in: 1...rows, using: &random)) }
        let query = (present + absent).shuffled().compactMap { SHA256Digest(hex: $0) }
        let client = WorkspaceClient(baseURL: server.base, token: token)
        let found = try client.presentContents(query)
        guard found.count == Set(present).count else { throw BenchError("\(backend): \(found.count) present, expected \(Set(present).count)") }
        var times: [Double] = []
        for _ in 0..<rounds { times.append(try Bench.time { _ = try client.presentContents(query) } * 1000) }
        times.sort()
        // Four devices checking at once (each its own connection).
        let concurrent = ConcurrentTimes()
        let base = server.base
        let threads = (0..<4).map { _ in
            Thread {
                let c = WorkspaceClient(baseURL: base, token: token)
                for _ in 0..<rounds {
                    let t = Bench.now()
                    _ = try? c.presentContents(query)
                    concurrent.add((Bench.now() - t) * 1000)
                }
            }
        }
        threads.forEach { $0.start() }
        while concurrent.count < 4 * rounds { usleep(10_000) }
        let many = concurrent.sorted()
        let rss = Bench.peakRSS(pid: server.pid) ?? 0
        return [backend, Bench.f(fill, 1), Bench.f(times[times.count / 2], 1), Bench.f(times.first!, 1), Bench.f(times.last!, 1),
                Bench.f(many[many.count / 2], 1), Bench.f(rss, 1), Bench.f(statusMB(pid: server.pid, "RssAnon:"), 1), Bench.f(statusMB(pid: server.pid, "RssFile:"), 1)]
    }

    /// A line of /proc/PID/status in MB (now, not the peak): RssAnon is the process's own
    /// memory, RssFile the file pages it maps (SQLite's mmap of the database counts there).
    static func statusMB(pid: Int32, _ key: String) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix(key) {
            return (line.split(separator: " ").compactMap { Double($0) }.first ?? 0) / 1024
        }
        return 0
    }
}

/// Times collected from several threads.
final class ConcurrentTimes: @unchecked Sendable { // guarded by `lock`
    private let lock = NSLock()
    private var times: [Double] = []
    func add(_ t: Double) { lock.withLock { times.append(t) } }
    var count: Int { lock.withLock { times.count } }
    func sorted() -> [Double] { lock.withLock { times.sorted() } }
}
