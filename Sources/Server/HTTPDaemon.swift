import CMicroHTTPD
import Synchronization
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// libmicrohttpd's daemon: a listening socket, one thread per connection, and the
/// C callbacks that turn its calls into `HTTPRequest`/`RequestBody`/`HTTPResponse`.
/// The callbacks capture nothing; they reach the daemon through the `cls` pointer
/// (an unretained `Unmanaged` reference, valid until `stop()` returns) and the
/// request's state through `con_cls` (retained there, released on completion).
final class HTTPDaemon: Sendable {
    let handler: HTTPHandler
    /// The `MHD_Daemon *`, stored as an integer so that the class stays Sendable; set once by start.
    private let daemon: Mutex<UInt>
    let port: UInt16

    /// Binds `host:port` (port 0 picks a free one) and starts serving, over TLS with `tls`.
    init(host: String, port: UInt16, handler: HTTPHandler, memoryLimit: Int = 256 * 1024,
         connectionLimit: UInt32 = 512, idleTimeout: UInt32 = 120, tls: TLSConfiguration? = nil) throws(ServerError) {
        self.handler = handler
        self.daemon = Mutex(0)
        let fd = try Self.listen(host: host, port: port)
        self.port = Self.boundPort(fd)
        let flags = UInt32(MHD_USE_THREAD_PER_CONNECTION.rawValue | MHD_USE_INTERNAL_POLLING_THREAD.rawValue | MHD_USE_POLL.rawValue | MHD_USE_ITC.rawValue)
        let cls = Unmanaged.passUnretained(self).toOpaque()
        guard let d = Self.start(tls, flags, fd, accessHandler, cls, completedHandler, cls, memoryLimit, connectionLimit, idleTimeout) else {
            close(fd)
            throw .cannotStart("libmicrohttpd refused to start on \(host):\(port)")
        }
        daemon.withLock { $0 = UInt(bitPattern: Int(bitPattern: UnsafeMutableRawPointer(d))) }
    }

    /// Stops accepting, closes connections and joins their threads. Idempotent.
    func stop() {
        let raw = daemon.withLock { value -> UInt in
            let old = value
            value = 0
            return old
        }
        guard raw != 0, let pointer = UnsafeMutableRawPointer(bitPattern: raw) else { return }
        let d = OpaquePointer(pointer)
        let fd = MHD_quiesce_daemon(d)
        MHD_stop_daemon(d)
        if fd >= 0 { close(fd) }
    }

    deinit { stop() }

    private static func listen(host: String, port: UInt16) throws(ServerError) -> Int32 {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else {
            throw .badAddress("'\(host)' is not an IPv4 address; use --listen 127.0.0.1:PORT")
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw .cannotListen("\(host):\(port)", Errno.current) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound != 0 {
            let e = Errno.current
            close(fd)
            if e.rawValue == EADDRINUSE { throw .addressInUse("\(host):\(port)") }
            throw .cannotListen("\(host):\(port)", e)
        }
        if Glibc.listen(fd, 128) != 0 {
            let e = Errno.current
            close(fd)
            throw .cannotListen("\(host):\(port)", e)
        }
        return fd
    }

    private static func boundPort(_ fd: Int32) -> UInt16 {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return UInt16(bigEndian: addr.sin_port)
    }
}



/// Per-request state kept in libmicrohttpd's `con_cls` between calls.
private final class RequestState {
    var body: RequestBody?
    var finished = false
    /// A reply decided at the headers of a request without a body, queued on the next
    /// call: queued at once, libmicrohttpd would close the connection (it cannot know
    /// the body is empty), and clients could not reuse it.
    var pending: HTTPResponse?
    init(body: RequestBody?, pending: HTTPResponse? = nil) { self.body = body; self.pending = pending }
}

/// Collects header or query values through `MHD_get_connection_values`. A name given
/// twice keeps its last value and, when the values differ, is listed in `conflicting`.
private final class ValueCollector {
    var values: [String: String] = [:]
    var conflicting: Set<String> = []
    let lowercase: Bool
    init(lowercase: Bool) { self.lowercase = lowercase }
}

private func collectValue(_ cls: UnsafeMutableRawPointer?, _ kind: MHD_ValueKind, _ key: UnsafePointer<CChar>?, _ keySize: Int,
                          _ value: UnsafePointer<CChar>?, _ valueSize: Int) -> MHD_Result {
    guard let cls, let key else { return vd_mhd_yes() }
    let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
    let raw = text(key, keySize)
    let name = collector.lowercase ? raw.lowercased() : raw
    let new = value.map { text($0, valueSize) } ?? ""
    if let old = collector.values[name], old != new { collector.conflicting.insert(name) }
    collector.values[name] = new
    return vd_mhd_yes()
}

/// `count` bytes as UTF-8, NULs included (invalid sequences become U+FFFD).
private func text(_ start: UnsafePointer<CChar>, _ count: Int) -> String {
    start.withMemoryRebound(to: UInt8.self, capacity: count) { String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self) }
}

private func values(_ connection: OpaquePointer, headers: Bool) -> (values: [String: String], conflicting: Set<String>) {
    let collector = ValueCollector(lowercase: headers)
    let cls = Unmanaged.passUnretained(collector).toOpaque()
    _ = withExtendedLifetime(collector) {
        headers ? vd_mhd_headers(connection, collectValue, cls) : vd_mhd_query(connection, collectValue, cls)
    }
    return (collector.values, collector.conflicting)
}

private func queue(_ connection: OpaquePointer, _ reply: HTTPResponse) -> MHD_Result {
    let response: OpaquePointer?
    switch reply.body {
    case .bytes(let bytes):
        response = bytes.withUnsafeBytes { raw in
            vd_mhd_response_copy(raw.count, raw.baseAddress)
        }
    case .file(let fd, let offset, let length):
        response = MHD_create_response_from_fd_at_offset64(UInt64(length), fd, UInt64(offset))
    case .stream(let length, let reader):
        let cls = Unmanaged.passRetained(ReaderBox(reader)).toOpaque()
        // 64 KiB pieces: the buffer comes from the connection's memory pool (256 KiB).
        response = MHD_create_response_from_callback(UInt64(length), 64 << 10, streamRead, cls, streamFree)
        if response == nil { streamFree(cls) }
    }
    guard let response else { return vd_mhd_no() }
    for (name, value) in reply.headers { MHD_add_response_header(response, name, value) }
    let result = MHD_queue_response(connection, UInt32(reply.status), response)
    MHD_destroy_response(response)
    return result
}

/// Holds a stream body's reader for libmicrohttpd (retained in `cls`, released in `streamFree`).
private final class ReaderBox {
    let reader: any BodyReader
    init(_ reader: any BodyReader) { self.reader = reader }
}

/// MHD_ContentReaderCallback: the next piece of a stream body.
private func streamRead(_ cls: UnsafeMutableRawPointer?, _ position: UInt64, _ buffer: UnsafeMutablePointer<CChar>?, _ max: Int) -> Int {
    guard let cls, let buffer else { return vd_mhd_reader_error() }
    let box = Unmanaged<ReaderBox>.fromOpaque(cls).takeUnretainedValue()
    guard let n = box.reader.read(at: Int64(position), into: UnsafeMutableRawBufferPointer(start: buffer, count: max)), n > 0 else {
        return vd_mhd_reader_error()
    }
    return n
}

/// MHD_ContentReaderFreeCallback: the reply is gone.
private func streamFree(_ cls: UnsafeMutableRawPointer?) {
    guard let cls else { return }
    Unmanaged<ReaderBox>.fromOpaque(cls).takeRetainedValue().reader.close()
}

/// MHD_AccessHandlerCallback: first call after the headers, then once per body chunk,
/// then once more with no data when the body is complete.
private func accessHandler(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
                           _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
                           _ uploadDataSize: UnsafeMutablePointer<Int>?, _ conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return vd_mhd_no() }
    let daemon = Unmanaged<HTTPDaemon>.fromOpaque(cls).takeUnretainedValue()

    guard let stored = conCls.pointee else {
        let headers = values(connection, headers: true)
        let request = HTTPRequest(method: String(cString: method), path: String(cString: url),
                                  headers: headers.values, query: values(connection, headers: false).values,
                                  conflicting: headers.conflicting)
        switch daemon.handler.route(request) {
        case .respond(let reply):
            if !request.expectsBody {
                conCls.pointee = Unmanaged.passRetained(RequestState(body: nil, pending: reply)).toOpaque()
                return vd_mhd_yes()
            }
            // Answered before the body: libmicrohttpd then does not read it and closes the connection.
            conCls.pointee = Unmanaged.passRetained(RequestState(body: nil)).toOpaque()
            return queue(connection, reply)
        case .read(let body):
            conCls.pointee = Unmanaged.passRetained(RequestState(body: body)).toOpaque()
            return vd_mhd_yes()
        }
    }

    let state = Unmanaged<RequestState>.fromOpaque(stored).takeUnretainedValue()
    if uploadDataSize.pointee > 0 {
        if let body = state.body, !state.finished, let uploadData {
            body.receive(UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee))
        }
        uploadDataSize.pointee = 0
        return vd_mhd_yes()
    }
    if let reply = state.pending {
        state.pending = nil
        return queue(connection, reply)
    }
    guard let body = state.body, !state.finished else { return vd_mhd_yes() }
    state.finished = true
    return queue(connection, body.finish())
}

/// MHD_RequestCompletedCallback: the request ended (answered, or the client went away).
private func completedHandler(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
                              _ conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ reason: MHD_RequestTerminationCode) {
    guard let conCls, let stored = conCls.pointee else { return }
    conCls.pointee = nil
    let state = Unmanaged<RequestState>.fromOpaque(stored).takeRetainedValue()
    if let body = state.body, !state.finished {
        state.finished = true
        body.abort()
    }
}
