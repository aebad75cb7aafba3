import Crypto
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The server's counters, served at `GET /metrics` in Prometheus' text format (0.0.4):
/// requests by route and status, body bytes in and out, latency by route, gauges read
/// when scraped (connections, held requests, uploads being written, buffered bytes), the
/// periodic garbage collection's work, and the process's start. Docs/operations.md,
/// "Metrics", lists the names.
///
/// A finished request costs one lock and a few additions into fixed arrays sized at
/// start (routes × statuses): no allocation, and a label never takes a value a client
/// chose (an unknown path is `other`, a status outside 100–599 is not counted).
/// Thread safety: the table is behind one `Mutex`; gauges are closures registered once
/// by the server and called at a scrape.
final class ServerMetrics: RequestObserver {
    /// Upper bounds of the latency histogram, seconds (and +Inf).
    static let bucketBounds: [Double] = [0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10]
    private static let statusSlots = 500  // 100...599
    private static let routeCount = RoutePattern.allCases.count

    private struct Table {
        var requests = [Int](repeating: 0, count: ServerMetrics.routeCount * ServerMetrics.statusSlots)
        var bytesIn = [Int64](repeating: 0, count: ServerMetrics.routeCount)
        var bytesOut = [Int64](repeating: 0, count: ServerMetrics.routeCount)
        /// Per route: one count per bound, then +Inf (not cumulative here; summed when written).
        var buckets = [Int](repeating: 0, count: ServerMetrics.routeCount * (ServerMetrics.bucketBounds.count + 1))
        var latencyMicroseconds = [Int64](repeating: 0, count: ServerMetrics.routeCount)
        var ended = [Int](repeating: 0, count: ServerMetrics.routeCount)
        var connectionsCut = (header: 0, keepAlive: 0, body: 0)
        var gc = (runs: 0, failures: 0, blocks: 0, bytes: Int64(0), contents: 0, objects: 0, objectBytes: Int64(0))
    }

    /// A value read at each scrape.
    struct Gauge: Sendable {
        let name: String
        let help: String
        let read: @Sendable () -> Int64
    }

    private let table = Mutex(Table())
    private let gauges = Mutex<[Gauge]>([])
    /// When this server started (Unix seconds with a fraction).
    let startTime: Double
    /// SHA-256 of the scrape token; nil: served to loopback clients only.
    private let tokenDigest: [UInt8]?

    init(token: String?) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        startTime = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        tokenDigest = token.map { SHA256Hasher.digest($0).bytes }
    }

    func register(_ gauge: Gauge) { gauges.withLock { $0.append(gauge) } }

    func finished(_ request: FinishedRequest) {
        guard let route = request.route else {
            table.withLock { t in
                if request.end == .headerDeadline { t.connectionsCut.header += 1 } else { t.connectionsCut.keepAlive += 1 }
            }
            return
        }
        let r = route.rawValue
        let seconds = Double(request.microseconds) / 1e6
        let bucket = Self.bucketBounds.firstIndex { seconds <= $0 } ?? Self.bucketBounds.count
        table.withLock { t in
            if (100...599).contains(request.status) { t.requests[r * Self.statusSlots + request.status - 100] += 1 }
            t.bytesIn[r] &+= request.bytesIn
            t.bytesOut[r] &+= request.bytesOut
            t.buckets[r * (Self.bucketBounds.count + 1) + bucket] += 1
            t.latencyMicroseconds[r] &+= request.microseconds
            t.ended[r] += 1
            if request.end == .bodyDeadline { t.connectionsCut.body += 1 }
        }
    }

    /// One run of the periodic collection (`report` nil: it failed).
    func collected(_ report: SpaceCollector.Report?) {
        table.withLock { t in
            t.gc.runs += 1
            guard let report else { t.gc.failures += 1; return }
            t.gc.blocks += report.blocks
            t.gc.bytes &+= report.bytes
            t.gc.contents += report.contents
            t.gc.objects += report.objects
            t.gc.objectBytes &+= report.objectBytes
        }
    }

    /// `GET /metrics`: with a token configured, only to a bearer of it (compared in
    /// constant time, from any address, loopback included: a reverse proxy on this
    /// machine makes every client loopback); without, only to a loopback client.
    func answer(_ request: HTTPRequest) -> HTTPResponse {
        if let tokenDigest {
            let challenge = [("WWW-Authenticate", "Bearer realm=\"vdrive-metrics\"")]
            let presented = request.header("Authorization").flatMap { value -> String? in
                let parts = value.split(separator: " ", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
                return String(parts[1])
            }
            guard let presented, HMACSHA256.equal(SHA256Hasher.digest(presented).bytes, tokenDigest) else {
                return .error(401, "unauthorized", "GET /metrics needs 'Authorization: Bearer <the token in the server's --metrics-token file>'", headers: challenge)
            }
        } else if !request.client.isLoopback {
            return .error(403, "forbidden", "this server serves GET /metrics to loopback clients only; its operator can start it with --metrics-token FILE to serve them to a scraper elsewhere")
        }
        return HTTPResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], body: .bytes(Array(render().utf8)))
    }

    /// The exposition text.
    func render() -> String {
        let t = table.withLock { $0 }
        var out = ""
        out.reserveCapacity(16 << 10)
        func family(_ name: String, _ type: String, _ help: String) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        family("vdrive_http_requests_total", "counter", "Requests answered, by route pattern and status.")
        for route in RoutePattern.allCases {
            for slot in 0..<Self.statusSlots {
                let n = t.requests[route.rawValue * Self.statusSlots + slot]
                if n > 0 { out += "vdrive_http_requests_total{route=\"\(route.text)\",status=\"\(slot + 100)\"} \(n)\n" }
            }
        }
        family("vdrive_http_request_bytes_total", "counter", "Request body bytes received, by route pattern.")
        for route in RoutePattern.allCases where t.ended[route.rawValue] > 0 {
            out += "vdrive_http_request_bytes_total{route=\"\(route.text)\"} \(t.bytesIn[route.rawValue])\n"
        }
        family("vdrive_http_response_bytes_total", "counter", "Reply body bytes queued (HEAD: none), by route pattern.")
        for route in RoutePattern.allCases where t.ended[route.rawValue] > 0 {
            out += "vdrive_http_response_bytes_total{route=\"\(route.text)\"} \(t.bytesOut[route.rawValue])\n"
        }
        family("vdrive_http_request_duration_seconds", "histogram", "From a request's header to the end of its reply, by route pattern.")
        let width = Self.bucketBounds.count + 1
        for route in RoutePattern.allCases where t.ended[route.rawValue] > 0 {
            let r = route.rawValue
            var cumulative = 0
            for (i, bound) in Self.bucketBounds.enumerated() {
                cumulative += t.buckets[r * width + i]
                out += "vdrive_http_request_duration_seconds_bucket{route=\"\(route.text)\",le=\"\(bound)\"} \(cumulative)\n"
            }
            out += "vdrive_http_request_duration_seconds_bucket{route=\"\(route.text)\",le=\"+Inf\"} \(t.ended[r])\n"
            out += "vdrive_http_request_duration_seconds_sum{route=\"\(route.text)\"} \(Double(t.latencyMicroseconds[r]) / 1e6)\n"
            out += "vdrive_http_request_duration_seconds_count{route=\"\(route.text)\"} \(t.ended[r])\n"
        }
        family("vdrive_http_connections_cut_total", "counter", "Connections closed by a deadline: header (no request yet), keepalive (idle after a reply), body (too slow).")
        out += "vdrive_http_connections_cut_total{reason=\"header\"} \(t.connectionsCut.header)\n"
        out += "vdrive_http_connections_cut_total{reason=\"keepalive\"} \(t.connectionsCut.keepAlive)\n"
        out += "vdrive_http_connections_cut_total{reason=\"body\"} \(t.connectionsCut.body)\n"
        for gauge in gauges.withLock({ $0 }) {
            family(gauge.name, "gauge", gauge.help)
            out += "\(gauge.name) \(gauge.read())\n"
        }
        let counters: [(String, String, Int64)] = [
            ("vdrive_gc_runs_total", "Periodic garbage collections run by this process (a run skipped for another's lock included).", Int64(t.gc.runs)),
            ("vdrive_gc_failures_total", "Periodic garbage collections that failed.", Int64(t.gc.failures)),
            ("vdrive_gc_contents_collected_total", "Contents no version records, removed.", Int64(t.gc.contents)),
            ("vdrive_gc_blocks_collected_total", "Blocks nothing names, removed.", Int64(t.gc.blocks)),
            ("vdrive_gc_bytes_freed_total", "Bytes of the blocks removed.", t.gc.bytes),
            ("vdrive_gc_orphan_objects_collected_total", "Objects in the bucket no block row names (PUT, never verified), removed.", Int64(t.gc.objects)),
            ("vdrive_gc_orphan_bytes_freed_total", "Bytes of the orphan objects removed.", t.gc.objectBytes),
        ]
        for (name, help, value) in counters {
            family(name, "counter", help)
            out += "\(name) \(value)\n"
        }
        family("process_start_time_seconds", "gauge", "When this server started, Unix seconds.")
        out += "process_start_time_seconds \(String(format: "%.3f", startTime))\n"
        return out
    }
}
