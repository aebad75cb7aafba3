import Client
import Crypto
import Foundation
import Protocol
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive-bench server --packs` (and a row of a full run): many small blocks, the way a
/// sync of small files moves them. `--pack-blocks` blocks (10,000) of 4-64 KiB of random
/// bytes, each in a file of its own (as a small file is), to a fresh `vdrive serve`:
///  - up one by one, as a device sends a large file's blocks: per block `POST /v1/uploads`
///    (its plan) and one tus PATCH (its commit: an fdatasync and a records transaction);
///  - up in packs (`sendBlockPack`, `POST /v1/blocks`, up to 16 MiB each: into the
///    server's pack file, one fdatasync, one transaction of its index and one of the
///    records per pack), the files opened a pack at a time;
///  - down one by one (`GET /v1/blocks/<hash>` each, hashed by the client), and in packs
///    (`fetchBlockPack`, `POST /v1/blocks/fetch`, 1,024 blocks a request, each hashed),
///    after an upload outside the clock.
/// Wall time, the client's CPU (the bench process) and the server's; rounds interleaved.
enum PackBenchmark {
    static func run(_ o: ServerBenchmark.Options) throws {
        let folder = o.dir + "/pack-blocks"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var rng = SeededGenerator(seed: 20261202)
        var blocks: [(path: String, digest: SHA256Digest, length: Int)] = []
        for i in 0..<o.packBlocks {
            let bytes = randomBytes(Int.random(in: (4 << 10)...(64 << 10), using: &rng), seed: UInt64(i) &+ 1)
            let path = "\(folder)/\(i)"
            ServerBenchmark.writeAll(path, bytes)
            blocks.append((path, SHA256Hasher.digest(bytes), bytes.count))
        }
        let total = blocks.reduce(Int64(0)) { $0 + Int64($1.length) }
        print(String(format: "vdrive-bench server --packs: %d blocks of 4-64 KiB (%.1f MB), %d rounds, in %@", blocks.count, Double(total) / 1e6, o.repeats, o.dir))

        let oneByOne = ServerBenchmark.Timed { server, token in
            let client = WorkspaceClient(baseURL: server.base, token: token)
            for b in blocks {
                let fd = open(b.path, O_RDONLY)
                defer { close(fd) }
                guard case .blocks(let tickets, _) = try client.createUpload(content: ContentHash.of(blocks: [b.digest]), size: Int64(b.length), blocks: [b.digest]) else {
                    throw BenchError("block \(b.digest.hex) was present on a fresh server")
                }
                for ticket in tickets { try client.uploadBlock(ticket, fd: fd) }
            }
        }
        let packs = ServerBenchmark.Timed { server, token in try sendInPacks(blocks, WorkspaceClient(baseURL: server.base, token: token)) }
        let fetchOneByOne = ServerBenchmark.Timed(prepare: { try sendInPacks(blocks, WorkspaceClient(baseURL: $0.base, token: $1)) }, bytes: total) { server, token in
            let client = WorkspaceClient(baseURL: server.base, token: token)
            let null = open("/dev/null", O_WRONLY)
            defer { close(null) }
            for b in blocks { try client.downloadBlock(b.digest, to: null) }
        }
        let fetchPacks = ServerBenchmark.Timed(prepare: { try sendInPacks(blocks, WorkspaceClient(baseURL: $0.base, token: $1)) }, bytes: total) { server, token in
            var count = 0
            try WorkspaceClient(baseURL: server.base, token: token).fetchBlockPack(blocks.map(\.digest)) { _, _ in count += 1 }
            guard count == blocks.count else { throw BenchError("\(count) blocks fetched of \(blocks.count)") }
        }
        let rows: [(String, ServerBenchmark.Timed)] = [
            ("up, one by one (POST /v1/uploads + PATCH each)", oneByOne),
            ("up, packs of up to 16 MiB (POST /v1/blocks)", packs),
            ("down, one by one (GET /v1/blocks/{hash} each)", fetchOneByOne),
            ("down, packs of 1,024 (POST /v1/blocks/fetch)", fetchPacks),
        ]
        print("| run | MB/s | wall s | client CPU s | server CPU s | server peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        var runs = [[ServerBenchmark.Figures]](repeating: [], count: rows.count)
        // Each row's data folder stays until the end. Removing one (10,000 files) between rows
        // made the next rows pay for it: on ext4 without a journal (this machine's) every new
        // inode steps over those freed in the last minute (five while their inode table is
        // dirty; `recently_deleted`), which tripled a pack row's server CPU (2.2 s to 7.1 s).
        let kept = o.dir + "/pack-data"
        defer { try? FileManager.default.removeItem(atPath: kept) }
        for round in 1...o.repeats {
            for (i, row) in rows.enumerated() {
                // No access log: 20,000 lines a row on the bench's stderr would be most of what it shows.
                runs[i].append(try ServerBenchmark.measure(o, label: row.0, extra: ["--access-log", "off"], row.1, keep: "\(kept)/\(round)-\(i)"))
            }
        }
        let medians = runs.map { $0.sorted { $0.wall < $1.wall }[$0.count / 2] }
        print("")
        print("Medians of \(o.repeats) rounds:")
        print("| run | MB/s | wall s | client CPU s | server CPU s | server peak RSS MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        for m in medians { print(m.row) }
        print(String(format: "packs vs one by one: up %.1f× faster (server CPU %.1f×), down %.1f× faster (server CPU %.1f×)",
                     medians[0].wall / medians[1].wall, medians[0].serverCPU / max(medians[1].serverCPU, 0.001),
                     medians[2].wall / medians[3].wall, medians[2].serverCPU / max(medians[3].serverCPU, 0.001)))
    }

    /// Sends `blocks` with `sendBlockPack`, a pack's worth of files open at a time.
    static func sendInPacks(_ blocks: [(path: String, digest: SHA256Digest, length: Int)], _ client: WorkspaceClient) throws {
        var start = 0
        while start < blocks.count {
            var end = start, bytes = 0
            while end < blocks.count, bytes + BlockPack.recordSize(length: blocks[end].length) <= API.maxPackBody {
                bytes += BlockPack.recordSize(length: blocks[end].length)
                end += 1
            }
            let fds = blocks[start..<end].map { open($0.path, O_RDONLY) }
            defer { fds.forEach { close($0) } }
            let sent = try client.sendBlockPack(zip(blocks[start..<end], fds).map { ($0.digest, $1, $0.length) })
            guard sent.stored + sent.present == end - start else { throw BenchError("a pack of \(end - start) blocks was answered \(sent)") }
            start = end
        }
    }
}
