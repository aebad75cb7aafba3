import CMicroHTTPD
import Foundation
import Synchronization
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// libmicrohttpd's daemon: a listening socket, a few epoll threads that read and write
/// every connection and route requests, and the C callbacks that turn its calls into
/// `HTTPRequest`/`RequestBody`/`HTTPResponse`. A body's `finish` (it hashes, fsyncs,
/// writes rows or calls the object store) runs on `workers` with the connection
/// suspended, so an epoll thread never waits for it; an idle or held connection costs
/// no thread (Docs/architecture.md, "The server's threads").
/// `guardian` closes the connections too slow to be served (ConnectionGuard.swift).
/// The callbacks capture nothing; they reach the daemon through the `cls` pointer
/// (an unretained `Unmanaged` reference, valid until `stop()` returns), the request's
/// state through `con_cls` (retained there, released on completion) and the connection's
/// record through its socket context (retained there, released on close).
final class HTTPDaemon: Sendable {
    let handler: HTTPHandler
    /// The `MHD_Daemon *`, stored as an integer so that the class stays Sendable; set once by start.
    private let daemon: Mutex<UInt>
    let port: UInt16
    let guardian: ConnectionGuard
    /// Told of each request once it ends (the access log, the metrics); nil: nobody.
    let observer: (any RequestObserver)?
    private let workers: WorkerPool
    /// Connections suspended and not yet resumed, and whether `stop` began: libmicrohttpd
    /// must not be stopped with a connection suspended, so `stop` waits for the count to
    /// reach zero, and once stopping, work runs on the calling thread instead.
    private let suspensions = Mutex((count: 0, stopping: false))
    private let held = Mutex<[ObjectIdentifier: HeldRequest]>([:])
    /// Held requests answered by `stop` whose reply is not sent yet.
    fileprivate let draining = Atomic<Int>(0)

    /// Binds `host:port` (port 0 picks a free one) and starts serving, over TLS with `tls`.
    init(host: String, port: UInt16, handler: HTTPHandler, limits: ConnectionLimits = ConnectionLimits(),
         memory: ConnectionMemory = ConnectionMemory(), threads: Int = HTTPDaemon.defaultThreads, workers: Int = 16,
         tls: TLSConfiguration? = nil, observer: (any RequestObserver)? = nil) throws(ServerError) {
        self.handler = handler
        self.observer = observer
        self.daemon = Mutex(0)
        if let problem = limits.problem { throw .cannotStart(problem) }
        raiseDescriptorLimit(to: UInt64(limits.total) + 256)
        let fd = try Self.listen(host: host, port: port)
        let address = Self.boundAddress(fd)
        self.port = UInt16(bigEndian: address.sin_port)
        self.guardian = ConnectionGuard(limits: limits, knock: ListenerKnock(listeningAt: address))
        self.workers = WorkerPool(size: workers, name: "vd-worker")
        let flags = vd_mhd_flag_epoll() | vd_mhd_flag_suspend()
        let cls = Unmanaged.passUnretained(self).toOpaque()
        guard let d = Self.start(tls, flags, fd, accessHandler, cls, completedHandler, cls, connectionNotified, cls, memory,
                                 limits.total, limits.perAddress, UInt32(max(1, threads)), limits.idleSeconds) else {
            close(fd)
            guardian.stop()
            self.workers.stop()
            throw .cannotStart("libmicrohttpd refused to start on \(host):\(port)")
        }
        daemon.withLock { $0 = UInt(bitPattern: Int(bitPattern: UnsafeMutableRawPointer(d))) }
    }

    /// One epoll thread per core: they move bytes and route; the workers finish bodies.
    static var defaultThreads: Int { max(2, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }

    /// Stops accepting, answers held requests with 503, lets running work finish, closes
    /// connections and joins the threads. Idempotent.
    func stop() {
        let raw = daemon.withLock { value -> UInt in
            let old = value
            value = 0
            return old
        }
        guard raw != 0, let pointer = UnsafeMutableRawPointer(bitPattern: raw) else { return }
        let d = OpaquePointer(pointer)
        let fd = MHD_quiesce_daemon(d)
        suspensions.withLock { $0.stopping = true }
        for request in held.withLock({ Array($0.values) }) { request.answer(HeldRequest.stopping, draining: true) }
        while suspensions.withLock({ $0.count }) > 0 { usleep(1000) }
        // Their 503 goes out before the connections close (bounded: a client may not read).
        let until = monotonicMilliseconds() + 2000
        while draining.load(ordering: .acquiring) > 0 && monotonicMilliseconds() < until { usleep(1000) }
        MHD_stop_daemon(d)
        if fd >= 0 { close(fd) }
        workers.stop()
        guardian.stop()
    }

    deinit { stop() }

    /// Runs `work` off the epoll thread with the connection suspended; the reply is put
    /// in `state` and the connection resumed, and libmicrohttpd calls the access handler
    /// again. Returns false when stopping: `work` ran here and its reply is in `state`.
    fileprivate func suspend(_ connection: OpaquePointer, _ state: RequestState, _ work: @escaping @Sendable () -> HTTPResponse) -> Bool {
        guard enterSuspension() else {
            state.outcome.put(.reply(work()))
            return false
        }
        MHD_suspend_connection(connection)
        let address = UInt(bitPattern: Int(bitPattern: UnsafeMutableRawPointer(connection)))
        workers.submit { [self] in resume(address, state, with: .reply(work())) }
        return true
    }

    /// Suspends the connection until the held request is answered; false when stopping.
    fileprivate func hold(_ connection: OpaquePointer, _ state: RequestState, _ start: @Sendable (HeldRequest) -> Void) -> Bool {
        let address = UInt(bitPattern: Int(bitPattern: UnsafeMutableRawPointer(connection)))
        let request = HeldRequest(daemon: self, connection: address, state: state)
        let accepted = suspensions.withLock { s -> Bool in
            if s.stopping { return false }
            s.count += 1
            held.withLock { $0[ObjectIdentifier(request)] = request }
            return true
        }
        guard accepted else { return false }
        MHD_suspend_connection(connection)
        start(request)
        return true
    }

    private func enterSuspension() -> Bool {
        suspensions.withLock { s -> Bool in
            if s.stopping { return false }
            s.count += 1
            return true
        }
    }

    fileprivate func resume(_ address: UInt, _ state: RequestState, with result: Resumption, held request: HeldRequest? = nil) {
        state.outcome.put(result)
        if let request { held.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(request)) } }
        guard let pointer = UnsafeMutableRawPointer(bitPattern: address) else { return }
        MHD_resume_connection(OpaquePointer(pointer))
        suspensions.withLock { $0.count -= 1 }
    }

    /// Requests held right now.
    var heldCount: Int { held.withLock { $0.count } }

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

    private static func boundAddress(_ fd: Int32) -> sockaddr_in {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return addr
    }
}



/// What a suspended request resumes with: the router's decision, or the reply.
enum Resumption {
    case route(Route)
    case reply(HTTPResponse)
}

/// A value handed from a worker to the connection's epoll thread. libmicrohttpd's
/// resume orders the two; the lock states it.
/// `@unchecked Sendable`: `value` is guarded by `lock`.
final class Handoff<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value?
    func put(_ new: Value) { lock.withLock { value = new } }
    func take() -> Value? { lock.withLock { defer { value = nil }; return value } }
}

/// Per-request state kept in libmicrohttpd's `con_cls` between calls.
/// `@unchecked Sendable`: used by the connection's epoll thread, or by one worker while
/// the connection is suspended; never by two at once.
final class RequestState: @unchecked Sendable {
    let expectsBody: Bool
    /// For the observer: what was asked, by whom, when (monotonic µs), and what was queued.
    let method: String
    let route: RoutePattern
    let client: ClientAddress
    let note: RequestNote
    let started = monotonicMicroseconds()
    var status = 0
    var bytesOut: Int64 = 0
    var body: RequestBody?
    var finished = false
    /// A reply decided at the headers of a request without a body, queued on the next
    /// call: queued at once, libmicrohttpd would close the connection (it cannot know
    /// the body is empty), and clients could not reuse it.
    var pending: HTTPResponse?
    let outcome = Handoff<Resumption>()
    /// The body's declared length (nil when chunked) and the bytes received of it.
    var declaredLength: Int64?
    var received: Int64 = 0
    /// Answered by a stopping server, which waits for the reply to be sent.
    var draining = false
    init(_ request: HTTPRequest) {
        expectsBody = request.expectsBody
        method = request.method
        route = RoutePattern(path: request.path)
        client = request.client
        note = request.note
    }

    /// The reply about to be queued: its status, and the body length a HEAD does not send.
    func queued(_ reply: HTTPResponse) {
        status = reply.status
        guard method != "HEAD" else { return }
        switch reply.body {
        case .bytes(let bytes): bytesOut = Int64(bytes.count)
        case .file(_, _, let length): bytesOut = length
        case .stream(let length, _): bytesOut = length
        }
    }
}

/// A request answered later, by an event: the route returned `.hold`, and the
/// connection stays suspended (no thread waits for it) until `answer` is called, from
/// any thread, once; later calls do nothing. The holder must answer within a bounded
/// time (a long poll answers "nothing new" after its wait): a suspended connection is
/// not watched, so a client that left is only noticed when its answer is sent. A server
/// stopping answers every held request with 503.
final class HeldRequest: Sendable {
    private let daemon: HTTPDaemon
    private let connection: UInt
    private let state: RequestState
    private let answered = Atomic<Bool>(false)

    fileprivate init(daemon: HTTPDaemon, connection: UInt, state: RequestState) {
        self.daemon = daemon; self.connection = connection; self.state = state
    }

    func answer(_ reply: HTTPResponse) { answer(reply, draining: false) }

    fileprivate func answer(_ reply: HTTPResponse, draining: Bool) {
        guard !answered.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if draining {
            state.draining = true
            daemon.draining.add(1, ordering: .releasing)
        }
        daemon.resume(connection, state, with: .reply(reply), held: self)
    }

    static var stopping: HTTPResponse {
        .error(503, "unavailable", "the server is stopping; try again in a few seconds", headers: [("Retry-After", "2")])
    }
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

private func queue(_ connection: OpaquePointer, _ reply: HTTPResponse, _ state: RequestState) -> MHD_Result {
    state.queued(reply)
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
        // 64 KiB pieces, in a buffer libmicrohttpd allocates with the reply (not from the connection's pool).
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
/// then once more with no data when the body is complete. Routing and finishing run on
/// a worker with the connection suspended; libmicrohttpd then calls again (same phase,
/// no data), and the result waiting in the state is applied.
private func accessHandler(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?, _ url: UnsafePointer<CChar>?,
                           _ method: UnsafePointer<CChar>?, _ version: UnsafePointer<CChar>?, _ uploadData: UnsafePointer<CChar>?,
                           _ uploadDataSize: UnsafeMutablePointer<Int>?, _ conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> MHD_Result {
    guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return vd_mhd_no() }
    let daemon = Unmanaged<HTTPDaemon>.fromOpaque(cls).takeUnretainedValue()
    let record = vd_mhd_socket_context(connection).map { Unmanaged<ConnectionRecord>.fromOpaque($0).takeUnretainedValue() }

    guard let stored = conCls.pointee else {
        let headers = values(connection, headers: true)
        let request = HTTPRequest(method: String(cString: method), path: String(cString: url),
                                  headers: headers.values, query: values(connection, headers: false).values,
                                  conflicting: headers.conflicting, client: record?.client ?? .unknown)
        record?.enter(.busy)
        let state = RequestState(request)
        if request.header("Transfer-Encoding") == nil { state.declaredLength = request.contentLength }
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        let route = daemon.handler.route(request)
        if case .hold(let start) = route {
            if daemon.hold(connection, state, start) { return vd_mhd_yes() }
            state.pending = HeldRequest.stopping
            return vd_mhd_yes()
        }
        return apply(.route(route), state, connection, record)
    }

    let state = Unmanaged<RequestState>.fromOpaque(stored).takeUnretainedValue()
    if uploadDataSize.pointee > 0 {
        if let body = state.body, !state.finished, let uploadData {
            body.receive(UnsafeRawBufferPointer(start: uploadData, count: uploadDataSize.pointee))
        }
        record?.received(uploadDataSize.pointee)
        state.received += Int64(uploadDataSize.pointee)
        if let length = state.declaredLength, state.received < length { record?.closeIfClientLeft() }
        uploadDataSize.pointee = 0
        return vd_mhd_yes()
    }
    if let outcome = state.outcome.take() { return apply(outcome, state, connection, record) }
    if let reply = state.pending {
        state.pending = nil
        return queue(connection, reply, state)
    }
    guard state.body != nil, !state.finished else { return vd_mhd_yes() }
    state.finished = true
    record?.enter(.busy)
    if daemon.suspend(connection, state, { state.body!.finish() }) { return vd_mhd_yes() }
    return state.outcome.take().map { apply($0, state, connection, record) } ?? vd_mhd_yes()
}

/// Applies the router's decision, or a reply a suspension left in `state`.
private func apply(_ outcome: Resumption, _ state: RequestState, _ connection: OpaquePointer, _ record: ConnectionRecord?) -> MHD_Result {
    switch outcome {
    case .reply(let reply) where state.body == nil:
        // A held request's answer, given at its headers' call: see `pending`.
        state.pending = reply
        return vd_mhd_yes()
    case .reply(let reply):
        return queue(connection, reply, state)
    case .route(.respond(let reply)):
        if !state.expectsBody {
            state.pending = reply
            return vd_mhd_yes()
        }
        // Answered before the body: libmicrohttpd then does not read it and closes the connection.
        return queue(connection, reply, state)
    case .route(.read(let body)):
        state.body = body
        record?.enter(.body)
        return vd_mhd_yes()
    case .route(.hold):
        return queue(connection, HeldRequest.stopping, state)  // handled before apply
    }
}

/// MHD_RequestCompletedCallback: the request ended (answered, or the client went away).
/// The connection's next header has its deadline from now.
private func completedHandler(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
                              _ conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ reason: MHD_RequestTerminationCode) {
    let record = connection.flatMap { vd_mhd_socket_context($0) }.map { Unmanaged<ConnectionRecord>.fromOpaque($0).takeUnretainedValue() }
    // Read before `enter` resets the phase: a body cut by its deadline ends here.
    let cut = record?.state.withLock { s -> ConnectionRecord.Cut? in
        s.requests += 1
        return s.cut
    } ?? nil
    record?.enter(.header)
    guard let conCls, let stored = conCls.pointee else { return }
    conCls.pointee = nil
    let state = Unmanaged<RequestState>.fromOpaque(stored).takeRetainedValue()
    let daemon = cls.map { Unmanaged<HTTPDaemon>.fromOpaque($0).takeUnretainedValue() }
    if state.draining { daemon?.draining.subtract(1, ordering: .releasing) }
    if let body = state.body, !state.finished {
        state.finished = true
        body.abort()
    }
    guard let observer = daemon?.observer else { return }
    let end: FinishedRequest.End
    switch vd_mhd_termination_kind(reason) {
    case 0: end = .sent
    case 1: end = .timeout
    case 2: end = .stopping
    default: end = cut == .body ? .bodyDeadline : .clientGone
    }
    observer.finished(FinishedRequest(method: state.method, route: state.route, status: state.status, bytesIn: state.received,
                                      bytesOut: state.bytesOut, microseconds: monotonicMicroseconds() - state.started,
                                      device: state.note.device, client: state.client, end: end))
}

/// MHD_NotifyConnectionCallback: a connection opened (its record starts the header
/// deadline) or closed (its record leaves the guard before the descriptor is closed).
private func connectionNotified(_ cls: UnsafeMutableRawPointer?, _ connection: OpaquePointer?,
                                _ socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ code: MHD_ConnectionNotificationCode) {
    guard let cls, let connection, let socketContext else { return }
    let daemon = Unmanaged<HTTPDaemon>.fromOpaque(cls).takeUnretainedValue()
    if code.rawValue == vd_mhd_notify_started() {
        let record = ConnectionRecord(fd: vd_mhd_connection_fd(connection), now: monotonicMilliseconds(), client: clientAddress(connection))
        socketContext.pointee = Unmanaged.passRetained(record).toOpaque()
        daemon.guardian.add(record)
    } else if let stored = socketContext.pointee {
        socketContext.pointee = nil
        let record = Unmanaged<ConnectionRecord>.fromOpaque(stored).takeRetainedValue()
        daemon.guardian.remove(record)
        // A header deadline leaves no request for completedHandler to report: reported here.
        let (cut, requests, since) = record.state.withLock { ($0.cut, $0.requests, $0.since) }
        if cut == .header, let observer = daemon.observer {
            observer.finished(FinishedRequest(method: nil, route: nil, status: 0, bytesIn: 0, bytesOut: 0,
                                              microseconds: (monotonicMilliseconds() - since) * 1000, device: nil, client: record.client,
                                              end: requests == 0 ? .headerDeadline : .keepAliveDeadline))
        }
    }
}

/// The connection's peer, read once when it opens (a few dozen bytes per connection).
private func clientAddress(_ connection: OpaquePointer) -> ClientAddress {
    var buffer = [CChar](repeating: 0, count: 64)
    let loopback = vd_mhd_client_address(connection, &buffer, socklen_t(buffer.count))
    guard loopback >= 0 else { return .unknown }
    let text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    return ClientAddress(text: text, isLoopback: loopback == 1)
}
