import CCurl
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where a request body comes from.
public enum RequestBodySource: Sendable {
    case none
    case bytes([UInt8])
    /// `length` bytes of `fd` from `offset`, read in pieces as libcurl asks (constant memory).
    case file(fd: Int32, offset: Int64, length: Int64)
    /// `length` bytes made by `source` in pieces as libcurl asks (a body read from several files).
    case stream(length: Int64, source: any RequestBodyStream)
}

/// A request body made piece by piece as it is sent (`RequestBodySource.stream`). Called
/// on the thread running the request only, in order, until `length` bytes came.
public protocol RequestBodyStream: AnyObject, Sendable {
    /// Fills the start of `buffer` with the next bytes; returns how many (more than 0),
    /// or a negative errno when they cannot be read (the request then fails with `.localIO`).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int
}

/// A reply: status, headers (names lowercased) and the body (unless it went to a file).
public struct HTTPResult: Sendable {
    public let status: Int
    public let headers: [String: String]
    public let body: [UInt8]
    public init(status: Int, headers: [String: String], body: [UInt8]) { self.status = status; self.headers = headers; self.body = body }
    public func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// Timeouts for every transfer.
public struct Timeouts: Sendable {
    /// Seconds to establish a connection.
    public var connect: Int
    /// A transfer slower than `lowSpeedBytes` per second for `lowSpeedSeconds` is abandoned.
    public var lowSpeedBytes: Int
    public var lowSpeedSeconds: Int
    /// Seconds for the whole transfer; 0: no limit (the low-speed limit still applies).
    public var total: Int
    public init(connect: Int = 10, lowSpeedBytes: Int = 1024, lowSpeedSeconds: Int = 30, total: Int = 0) {
        self.connect = connect; self.lowSpeedBytes = lowSpeedBytes; self.lowSpeedSeconds = lowSpeedSeconds; self.total = total
    }

    /// These timeouts for a request the server may hold `seconds` before it answers (a
    /// long poll): the transfer is silent meanwhile, so the low-speed limit starts after
    /// the hold, and a server that never answers is given up on a little later.
    public func holding(_ seconds: Int) -> Timeouts {
        var copy = self
        copy.lowSpeedSeconds = max(lowSpeedSeconds, seconds + 15)
        copy.total = seconds + 30
        return copy
    }
}

private let curlGlobalInit: Bool = { curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK }()

/// The libcurl easy handle, reset between requests (which keeps its connection cache).
/// `@unchecked Sendable`: one request at a time owns it (taken out of `HTTPConnection`'s
/// idle list for the request, put back after).
final class CurlEasy: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    /// The aligned buffer of downloads written past the page cache (DirectSink), made on
    /// first need and kept with the handle.
    private var directBuffer: UnsafeMutableRawPointer?

    init() {
        precondition(curlGlobalInit, "curl_global_init failed")
        guard let h = curl_easy_init() else { fatalError("curl_easy_init failed: out of memory") }
        handle = h
    }

    func directSink(direct: Int32, buffered: Int32, offset: Int64) -> DirectSink? {
        let buffer = directBuffer ?? DirectSink.makeBuffer()
        directBuffer = buffer
        return DirectSink(direct: direct, buffered: buffered, offset: offset, buffer: buffer)
    }

    deinit {
        curl_easy_cleanup(handle)
        directBuffer?.deallocate()
    }
}

/// State shared with the C callbacks of one transfer, reached through their userdata pointer.
private final class Transfer {
    // Request body.
    var bytes: [UInt8] = []
    /// The caller's buffer, valid during the transfer (`perform(bytes:)`).
    var raw: UnsafeRawPointer?
    var fd: Int32 = -1
    var stream: (any RequestBodyStream)?
    var position: Int64 = 0
    /// Where the body starts (`position` before the first read): a rewind goes back here.
    var start: Int64 = 0
    var end: Int64 = 0
    var readError: Int32 = 0
    // Response.
    var headers: [String: String] = [:]
    var body: [UInt8] = []
    var responseLimit: Int = 0
    var overflow = false
    var sink: Int32 = -1
    var sinkOffset: Int64 = 0
    var writeError: Int32 = 0
    var received: Int64 = 0
    var sinkHook: ((UnsafeRawBufferPointer) -> Void)?
    /// Set when the download goes to `sink` past the page cache.
    var direct: DirectSink?
    var progress: ((Int64) -> Bool)?
    var cancelled = false
    /// libcurl's words on a failure (CURLOPT_ERRORBUFFER): which certificate check failed.
    let errorBuffer: UnsafeMutablePointer<CChar> = {
        let p = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
        p.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        return p
    }()
    deinit { errorBuffer.deallocate() }
    var errorDetail: String { String(cString: errorBuffer) }
}

private func readCallback(_ buffer: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let buffer, let userdata else { return 0 }
    let t = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
    let want = Int(min(Int64(size * count), t.end - t.position))
    if want <= 0 { return 0 }
    if let raw = t.raw {
        UnsafeMutableRawPointer(buffer).copyMemory(from: raw + Int(t.position), byteCount: want)
        t.position += Int64(want)
        return want
    }
    if let stream = t.stream {
        let n = stream.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: want))
        if n <= 0 {
            t.readError = n < 0 ? Int32(clamping: -n) : EIO
            return Int(CURL_READFUNC_ABORT)
        }
        t.position += Int64(n)
        return n
    }
    if t.fd < 0 {
        t.bytes.withUnsafeBytes { raw in
            UnsafeMutableRawPointer(buffer).copyMemory(from: raw.baseAddress! + Int(t.position), byteCount: want)
        }
        t.position += Int64(want)
        return want
    }
    while true {
        let n = pread(t.fd, buffer, want, off_t(t.position))
        if n < 0 && errno == EINTR { continue }
        if n <= 0 {
            t.readError = n < 0 ? errno : EIO
            return Int(CURL_READFUNC_ABORT)
        }
        t.position += Int64(n)
        return n
    }
}

/// Rewinds the request body: libcurl sends a request again on a new connection when the
/// kept-alive one turned out closed (a restarted server, an idle timeout), and needs the
/// body from its start. Without this it failed with "rewinding of the data stream failed"
/// and the caller waited out a retry. A stream cannot go back.
private func seekCallback(_ userdata: UnsafeMutableRawPointer?, _ offset: curl_off_t, _ origin: Int32) -> Int32 {
    guard let userdata else { return CURL_SEEKFUNC_CANTSEEK }
    let t = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
    guard t.stream == nil, origin == SEEK_SET, offset >= 0, offset <= t.end - t.start else { return CURL_SEEKFUNC_CANTSEEK }
    t.position = t.start + Int64(offset)
    return CURL_SEEKFUNC_OK
}

private func writeCallback(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let data, let userdata else { return 0 }
    let t = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
    let n = size * count
    let chunk = UnsafeRawBufferPointer(start: data, count: n)
    if t.sink < 0, let hook = t.sinkHook {   // streamed to the hook only
        hook(chunk)
        t.received += Int64(n)
        return n
    }
    if t.sink >= 0 {
        if let direct = t.direct {
            if !direct.append(chunk) { t.writeError = direct.error; return 0 }
        } else {
            var done = 0
            while done < n {
                let w = pwrite(t.sink, data + done, n - done, off_t(t.sinkOffset) + off_t(done))
                if w < 0 && errno == EINTR { continue }
                if w <= 0 { t.writeError = w < 0 ? errno : EIO; return 0 }
                done += w
            }
        }
        t.sinkOffset += Int64(n)
        t.sinkHook?(chunk)
        t.received += Int64(n)
        return n
    }
    if t.body.count + n > t.responseLimit { t.overflow = true; return 0 }
    t.body.append(contentsOf: chunk)
    return n
}

private func headerCallback(_ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ count: Int, _ userdata: UnsafeMutableRawPointer?) -> Int {
    guard let data, let userdata else { return 0 }
    let t = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
    let n = size * count
    var bytes = Array(UnsafeRawBufferPointer(start: data, count: n))
    while let last = bytes.last, last == 13 || last == 10 || last == 32 { bytes.removeLast() }
    if bytes.starts(with: Array("HTTP/".utf8)) { t.headers = [:]; return n }
    if let colon = bytes.firstIndex(of: 58) {
        var start = colon + 1
        while start < bytes.count && bytes[start] == 32 { start += 1 }
        t.headers[String(decoding: bytes[..<colon], as: UTF8.self).lowercased()] = String(decoding: bytes[start...], as: UTF8.self)
    }
    return n
}

private func progressCallback(_ userdata: UnsafeMutableRawPointer?, _ dlTotal: curl_off_t, _ dlNow: curl_off_t, _ ulTotal: curl_off_t, _ ulNow: curl_off_t) -> Int32 {
    guard let userdata else { return 0 }
    let t = Unmanaged<Transfer>.fromOpaque(userdata).takeUnretainedValue()
    guard let progress = t.progress else { return 0 }
    if progress(Int64(ulNow > 0 ? ulNow : dlNow)) { return 0 }
    t.cancelled = true
    return 1
}

/// Reusable HTTP connections (libcurl easy handles, each keeping its connection alive).
/// A request takes an idle handle, or makes one when every handle is busy, and gives it
/// back when it is done: so concurrent callers (the backup's sender threads) each get a
/// connection of their own instead of waiting for one another, and a caller that is
/// alone keeps reusing one kept-alive connection. At most as many handles exist as
/// requests ever ran at once. Public so that tests can send raw requests.
public final class HTTPConnection: Sendable {
    /// Idle handles, the most recently used last (its connection is the likeliest alive).
    private let idle = Mutex<[CurlEasy]>([])
    public let timeouts: Timeouts
    /// PEM file of the CAs to trust instead of the system's (a private CA), for every
    /// request of this connection; nil trusts the system's store. Certificates are always
    /// verified, name included (libcurl's default, which nothing here turns off).
    public let caFile: String?

    public init(timeouts: Timeouts = Timeouts(), caFile: String? = nil) { self.timeouts = timeouts; self.caFile = caFile }

    /// The only URL schemes a request may use (libcurl's list): every URL the server
    /// hands a device (upload plans, a redirect to its store) is http or https, and no
    /// other scheme libcurl knows (file, ftp, …) is ever opened on the device.
    static let schemes = "http,https"

    /// True for an absolute http or https URL (the only place a redirect may lead).
    public static func isWebURL(_ url: String) -> Bool {
        let lower = url.prefix(8).lowercased()
        let scheme = lower.hasPrefix("http://") ? 7 : lower.hasPrefix("https://") ? 8 : 0
        return scheme > 0 && url.count > scheme
    }

    /// Sends one request and waits for the reply. Response bodies go to memory (at most
    /// `responseLimit` bytes) or, with `sink`, to that descriptor from `sinkOffset`
    /// (`sinkHook` sees each written piece), or, with `sinkHook` alone, only to the hook
    /// (nothing kept in memory here). `progress` gets bytes sent (or received)
    /// so far and returns false to cancel.
    /// `directSink`: another descriptor of `sink`'s file, opened with O_DIRECT; the body
    /// is then written through it a megabyte at a time, past the page cache (DirectSink),
    /// when `sinkOffset` is aligned. `timeouts`: this request's, instead of the connection's.
    public func perform(method: String, url: String, headers: [String] = [], body: RequestBodySource = .none,
                        responseLimit: Int = 16 << 20, sink: Int32? = nil, sinkOffset: Int64 = 0, directSink: Int32? = nil,
                        sinkHook: ((UnsafeRawBufferPointer) -> Void)? = nil,
                        progress: ((Int64) -> Bool)? = nil, timeouts: Timeouts? = nil) throws(ClientError) -> HTTPResult {
        try run(method: method, url: url, headers: headers, body: body, raw: nil, responseLimit: responseLimit,
                sink: sink, sinkOffset: sinkOffset, directSink: directSink, sinkHook: sinkHook, progress: progress, timeouts: timeouts)
    }

    /// Sends `bytes` as the request body straight from the caller's buffer (valid for the
    /// call): no copy into an array, so a 4 MiB PATCH costs no allocation and no page
    /// faults (they showed in the mount's profile while it backed up photos).
    public func perform(method: String, url: String, headers: [String] = [], bytes: UnsafeRawBufferPointer,
                        progress: ((Int64) -> Bool)? = nil) throws(ClientError) -> HTTPResult {
        try run(method: method, url: url, headers: headers, body: .none, raw: bytes, responseLimit: 16 << 20,
                sink: nil, sinkOffset: 0, directSink: nil, sinkHook: nil, progress: progress)
    }

    private func run(method: String, url: String, headers: [String], body: RequestBodySource, raw: UnsafeRawBufferPointer?,
                     responseLimit: Int, sink: Int32?, sinkOffset: Int64, directSink: Int32?,
                     sinkHook: ((UnsafeRawBufferPointer) -> Void)?,
                     progress: ((Int64) -> Bool)?, timeouts requested: Timeouts? = nil) throws(ClientError) -> HTTPResult {
        let transfer = Transfer()
        transfer.responseLimit = responseLimit
        transfer.sink = sink ?? -1
        transfer.sinkOffset = sinkOffset
        transfer.sinkHook = sinkHook
        transfer.progress = progress
        let timeouts = requested ?? self.timeouts, caFile = self.caFile
        let easy = idle.withLock { $0.popLast() } ?? CurlEasy()
        defer { idle.withLock { $0.append(easy) } }
        if let directSink, let sink { transfer.direct = easy.directSink(direct: directSink, buffered: sink, offset: sinkOffset) }
        let result: Result<HTTPResult, ClientError> = {
            let h = easy.handle
            curl_easy_reset(h)
            let ud = Unmanaged.passUnretained(transfer).toOpaque()
            var list: UnsafeMutablePointer<curl_slist>?
            defer { curl_slist_free_all(list) }
            for header in headers { list = curl_slist_append(list, header) }
            vd_curl_setopt_str(h, CURLOPT_URL, url)
            vd_curl_setopt_str(h, CURLOPT_PROTOCOLS_STR, Self.schemes)
            vd_curl_setopt_str(h, CURLOPT_REDIR_PROTOCOLS_STR, Self.schemes)
            vd_curl_setopt_long(h, CURLOPT_NOSIGNAL, 1)
            vd_curl_setopt_long(h, CURLOPT_CONNECTTIMEOUT, timeouts.connect)
            vd_curl_setopt_long(h, CURLOPT_LOW_SPEED_LIMIT, timeouts.lowSpeedBytes)
            vd_curl_setopt_long(h, CURLOPT_LOW_SPEED_TIME, timeouts.lowSpeedSeconds)
            if timeouts.total > 0 { vd_curl_setopt_long(h, CURLOPT_TIMEOUT, timeouts.total) }
            vd_curl_setopt_long(h, CURLOPT_TCP_KEEPALIVE, 1)
            if let caFile { vd_curl_setopt_str(h, CURLOPT_CAINFO, caFile) }
            vd_curl_setopt_ptr(h, CURLOPT_ERRORBUFFER, transfer.errorBuffer)
            vd_curl_setopt_write(h, writeCallback)
            vd_curl_setopt_ptr(h, CURLOPT_WRITEDATA, ud)
            // A download into a file (or to `sinkHook`): 240 KiB per write callback instead of 16 KiB, so a
            // 4 MiB block is 18 pwrites and hash updates, not 256. libcurl allocates its receive
            // buffer again after this option (the reset set it back to 16 KiB): at 256 KiB, the
            // mount's mmap threshold (DaemonTuning), that was a new mapping per transfer, its pages
            // faulted in by the next recv (3% of a cold read's CPU in a profile); below it, the
            // buffer comes from the heap (Docs/benchmarks.md, "Online-only content").
            if sink != nil || sinkHook != nil { vd_curl_setopt_long(h, CURLOPT_BUFFERSIZE, 240 << 10) }
            vd_curl_setopt_header(h, headerCallback)
            vd_curl_setopt_ptr(h, CURLOPT_HEADERDATA, ud)
            if progress != nil {
                vd_curl_setopt_xferinfo(h, progressCallback)
                vd_curl_setopt_ptr(h, CURLOPT_XFERINFODATA, ud)
                vd_curl_setopt_long(h, CURLOPT_NOPROGRESS, 0)
            }
            switch body {
            case .none where raw != nil:
                transfer.raw = raw?.baseAddress
                transfer.end = Int64(raw?.count ?? 0)
            case .none:
                if method == "HEAD" { vd_curl_setopt_long(h, CURLOPT_NOBODY, 1) }
                else if method != "GET" { vd_curl_setopt_str(h, CURLOPT_CUSTOMREQUEST, method) }
            case .bytes(let bytes):
                transfer.bytes = bytes
                transfer.end = Int64(bytes.count)
            case .file(let fd, let offset, let length):
                transfer.fd = fd
                transfer.position = offset
                transfer.end = offset + length
            case .stream(let length, let source):
                transfer.stream = source
                transfer.end = length
            }
            if case .none = body, raw == nil {} else {
                vd_curl_setopt_long(h, CURLOPT_UPLOAD, 1)
                vd_curl_setopt_off(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(transfer.end - transfer.position))
                transfer.start = transfer.position
                vd_curl_setopt_read(h, readCallback)
                vd_curl_setopt_ptr(h, CURLOPT_READDATA, ud)
                vd_curl_setopt_seek(h, seekCallback)
                vd_curl_setopt_ptr(h, CURLOPT_SEEKDATA, ud)
                vd_curl_setopt_str(h, CURLOPT_CUSTOMREQUEST, method)
            }
            vd_curl_setopt_ptr(h, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
            let code = curl_easy_perform(h)
            if code != CURLE_OK { return .failure(Self.map(code, transfer, url: url, caFile: caFile)) }
            if let direct = transfer.direct, !direct.finish() {
                return .failure(.localIO("writing the downloaded bytes failed: \(String(cString: strerror(direct.error)))"))
            }
            var status = 0
            vd_curl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
            return .success(HTTPResult(status: status, headers: transfer.headers, body: transfer.body))
        }()
        return try result.get()
    }

    private static func map(_ code: CURLcode, _ t: Transfer, url: String, caFile: String?) -> ClientError {
        let text = String(cString: curl_easy_strerror(code))
        switch code {
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CONNECT_ERROR:
            return .insecure(Self.untrusted(code, detail: t.errorDetail.isEmpty ? text : t.errorDetail, url: url, caFile: caFile))
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY,
             CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE:
            return .unreachable(text)
        case CURLE_OPERATION_TIMEDOUT:
            return .timedOut
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        case CURLE_UNSUPPORTED_PROTOCOL:
            return .invalidResponse("a URL other than http or https (\(text)): not opened")
        case CURLE_READ_ERROR:
            return .localIO("reading the file to upload failed: \(String(cString: strerror(t.readError)))")
        case CURLE_WRITE_ERROR:
            if t.overflow { return .invalidResponse("the reply is larger than \(t.responseLimit) bytes") }
            return .localIO("writing the downloaded bytes failed: \(String(cString: strerror(t.writeError)))")
        default:
            return .unreachable("curl error \(code.rawValue): \(text)")
        }
    }

    /// A TLS failure in words a user can act on: what was refused, where, and the way out.
    private static func untrusted(_ code: CURLcode, detail: String, url: String, caFile: String?) -> String {
        let origin = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false).prefix(3).joined(separator: "/")
        if code == CURLE_SSL_CACERT_BADFILE {
            return "cannot use the CA file \(caFile ?? "(system store)") to check \(origin): \(detail); give a readable PEM file of the CA's certificate"
        }
        let trusted = caFile.map { "the CA file \($0)" } ?? "the system's CAs"
        return "TLS connection to \(origin) refused: \(detail) (trusting \(trusted)); "
            + "if the server's certificate comes from a private CA, give that CA's certificate with --ca-file FILE "
            + "(or \"caFile\" in remote.json); if it expired or names another host, renew it on the server"
    }
}
