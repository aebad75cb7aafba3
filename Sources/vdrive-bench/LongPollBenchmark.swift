import Client
import Foundation
import Protocol
import Server
import Storage
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The long-poll row of `vdrive-bench server`: a fresh `vdrive serve` (embedded records)
/// holding `GET /v1/changes?wait=60` from 5,000 connections at the end of the feed (as
/// 5,000 idle devices would), its limits raised to admit them: the server's RSS and CPU
/// while they are held, then the time from one record's request (its blocks already
/// uploaded) until each of them has its answer, and the server CPU that wake-up cost.
/// The answers may come before the record's own 201 reaches the client: the clock starts
/// when the record is sent. Then the RSS once they are answered (the connections kept
/// alive), and again after a second round: every device polls again on its own connection,
/// is held, and a second record answers them (what devices that follow the feed do).
enum LongPollBenchmark {
    struct Figures {
        let polls: Int
        let idleRSS: Double
        let heldRSS: Double
        let heldCPU: Double
        let heldSeconds: Double
        let latencies: [Double]
        let recordCall: Double
        let wakeCPU: Double
        /// After the answers, the connections kept alive for the devices' next polls.
        let answeredRSS: Double
        /// The second round on the same connections: held again, then answered again.
        let heldAgainRSS: Double
        let answeredAgain: Int
        let answeredAgainRSS: Double
        func percentile(_ p: Double) -> Double {
            let sorted = latencies.sorted()
            return sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] * 1000
        }
        var row: String {
            String(format: "| %d | %.1f | %.1f | %.3f | %.1f | %.1f | %.1f | %.1f | %d | %.2f | %.1f | %.1f | %d | %.1f |", polls, idleRSS, heldRSS,
                   heldCPU / heldSeconds, recordCall * 1000, percentile(0.5), percentile(0.99), (latencies.max() ?? 0) * 1000,
                   latencies.count, wakeCPU, answeredRSS, heldAgainRSS, answeredAgain, answeredAgainRSS)
        }
    }

    static func run(_ o: ServerBenchmark.Options, polls: Int = 5000, holdSeconds: Double = 10) throws -> [Figures] {
        LockoutBenchmark.raiseOpenFiles(UInt(polls) + 512)
        let extra = ["--max-connections-per-address", String(polls + 100), "--max-connections", String(polls + 1000)]
        var rows: [Figures] = []
        for round in 1...o.repeats {
            let data = o.dir + "/longpoll-data"
            try? FileManager.default.removeItem(atPath: data)
            let token = try DeviceRegistry(dataDirectory: data).add("bench")
            let server = try RunningServer(vdrive: o.vdrive, data: data, extra: extra)
            defer { server.stop(); try? FileManager.default.removeItem(atPath: data) }
            let port = UInt16(server.base.split(separator: ":").last ?? "0") ?? 0
            let client = WorkspaceClient(baseURL: server.base, token: token)
            try record(client, in: o.dir, seed: 1)()
            let latest = try client.changesPage(since: 0).latestSequence ?? 0
            let sampler = RSSSampler(pid: server.pid)
            let idle = Double(sampler.sample()) / 1024

            func poll(since: Int64) -> String {
                "GET /v1/changes?since=\(since)&wait=60 HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n"
            }
            let request = poll(since: latest)
            var held: [SlowSocket] = []
            held.reserveCapacity(polls)
            for _ in 0..<polls {
                let c = try SlowSocket(port: port, from: "127.0.0.1")
                guard c.send(request) else { throw BenchError("a poll could not be sent") }
                held.append(c)
            }
            // Held once the server has read every request and gone quiet.
            try settle(server)
            let cpuBefore = server.cpuSeconds()
            let start = Bench.now()
            while Bench.now() - start < holdSeconds { usleep(100_000) }
            let heldCPU = server.cpuSeconds() - cpuBefore
            let heldRSS = Double(sampler.sample()) / 1024
            let answeredEarly = held.filter { $0.closedByServer() || readable($0.fd) }.count
            guard answeredEarly == 0 else { throw BenchError("\(answeredEarly) polls were answered before any change") }

            let commit = try record(client, in: o.dir, seed: UInt64(round + 1))
            let wakeBefore = server.cpuSeconds()
            let sent = Bench.now()
            try commit()
            let recordCall = Bench.now() - sent
            let latencies = waitForReplies(held, timeout: 30).map { $0 - sent }
            let wakeCPU = server.cpuSeconds() - wakeBefore
            try settle(server)
            let answeredRSS = Double(sampler.sample()) / 1024

            // The devices poll again, each on its kept-alive connection, after the new record.
            let next = try client.changesPage(since: 0).latestSequence ?? 0
            let again = poll(since: next)
            for c in held where !c.send(again) { throw BenchError("a second poll could not be sent") }
            try settle(server)
            let heldAgainRSS = Double(sampler.sample()) / 1024
            try record(client, in: o.dir, seed: UInt64(1000 + round))()
            let answeredAgain = waitForReplies(held, timeout: 30).count
            try settle(server)
            let figures = Figures(polls: polls, idleRSS: idle, heldRSS: heldRSS, heldCPU: heldCPU, heldSeconds: holdSeconds,
                                  latencies: latencies, recordCall: recordCall, wakeCPU: wakeCPU, answeredRSS: answeredRSS,
                                  heldAgainRSS: heldAgainRSS, answeredAgain: answeredAgain, answeredAgainRSS: Double(sampler.sample()) / 1024)
            print(figures.row)
            rows.append(figures)
        }
        return rows
    }

    /// Uploads a small file's blocks; returns the call that records it.
    static func record(_ client: WorkspaceClient, in dir: String, seed: UInt64) throws -> () throws -> Void {
        let bytes = randomBytes(10_000, seed: 7000 + seed)
        let path = dir + "/longpoll-\(seed)"
        ServerBenchmark.writeAll(path, bytes)
        defer { unlink(path) }
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        let manifest = try WorkspaceClient.manifest(fd: fd, size: Int64(bytes.count))
        try client.uploadFile(fd: fd, size: manifest.size, manifest: manifest)
        let record = FileRecord(path: "Camera Roll/\(seed).jpg", hash: manifest.content.hex, size: manifest.size,
                                blocks: manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: Int64(seed))
        return { _ = try client.recordFile(record) }
    }

    /// Returns once the server's CPU time has not moved for a second (at most 60 s).
    static func settle(_ server: RunningServer) throws {
        var last = server.cpuSeconds()
        let start = Bench.now()
        while Bench.now() - start < 60 {
            usleep(1_000_000)
            let now = server.cpuSeconds()
            if now - last < 0.02 { return }
            last = now
        }
        throw BenchError("the server did not go quiet within 60 s of the polls")
    }

    static func readable(_ fd: Int32) -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) > 0
    }

    /// When each connection's whole reply arrived (a status line and its declared body),
    /// for those that got one within `timeout` seconds.
    static func waitForReplies(_ sockets: [SlowSocket], timeout: Double) -> [Double] {
        var pending = Dictionary(uniqueKeysWithValues: sockets.map { ($0.fd, [UInt8]()) })
        var times: [Double] = []
        let deadline = Bench.now() + timeout
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while !pending.isEmpty && Bench.now() < deadline {
            var fds = pending.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&fds, nfds_t(fds.count), 100) > 0 else { continue }
            let now = Bench.now()
            for p in fds where p.revents != 0 {
                let n = recv(p.fd, &chunk, chunk.count, Int32(MSG_DONTWAIT))
                if n <= 0 {
                    pending[p.fd] = nil  // closed without a whole reply: not counted
                    continue
                }
                pending[p.fd]! += chunk[0..<n]
                if complete(pending[p.fd]!) {
                    times.append(now)
                    pending[p.fd] = nil
                }
            }
        }
        return times
    }

    /// A whole 200 reply: its head and Content-Length bytes of body.
    static func complete(_ bytes: [UInt8]) -> Bool {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.hasPrefix("HTTP/1.1 200"), let end = text.range(of: "\r\n\r\n") else { return false }
        let head = text[..<end.lowerBound].lowercased()
        guard let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
              let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) else { return false }
        return text[end.upperBound...].utf8.count >= length
    }

    static func report(_ rows: [Figures]) {
        guard !rows.isEmpty else { return }
        let median = rows.sorted { $0.percentile(0.5) < $1.percentile(0.5) }[rows.count / 2]
        print("")
        print("Long poll (median round of \(rows.count), by wake latency):")
        print("| held polls | server RSS idle MiB | RSS with the polls held MiB | server CPU while held (s per s) | record call ms | answer p50 ms | answer p99 ms | last answer ms | answered | server CPU of the wake s | RSS after the answers MiB | RSS held again MiB | answered again | RSS after the second answers MiB |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(median.row)
    }
}
