/// Server: the workspace server over libmicrohttpd.
///
/// Terms: the *daemon* is libmicrohttpd's listener (HTTPDaemon.swift, the only file
/// that calls it); the *router* turns a request's method and path into a reply or
/// a *request body* sink that receives the body chunk by chunk; *metadata* is the
/// records (devices, blocks, contents, uploads, files) in SQLite or PostgreSQL behind
/// `RecordStore` (RecordStore.swift); a file's content is
/// a *manifest* (content hash, size, block list) over 4 MiB *blocks*, which live in the
/// *block store* (`BlockStore`: the folder `blobs/` or an S3 bucket), partial tus
/// uploads in the staging folder of `blobs/`.
/// Thread safety: libmicrohttpd's few epoll threads read and write the sockets and call
/// the router; a body's `finish` (hashing, fsync, rows, the object store) runs on a
/// bounded worker pool while the connection is suspended, so it never stalls the other
/// connections of its epoll thread (HTTPDaemon.swift). A long poll is a held request
/// (`Route.hold`): it waits in the `ChangeNotifier` with no thread, and its page is read
/// again on the notifier's own threads when its feed moves.
/// Shared state is behind `Synchronization.Mutex` (the SQLite connection, the table of
/// uploads being written) or a pool (PostgreSQL connections, one borrowed per record
/// operation); a request body sink is used by one thread at a time. No handler waits
/// on Swift concurrency.
/// Imports: CMicroHTTPD (HTTPDaemon.swift only), Postgres (the PostgreSQL files:
/// PostgresRecords, PostgresPool, RecordsCheck, DatabaseLocation, ChangeListener, and
/// ServerError for its error kinds), Storage, Protocol, Crypto. Nothing of FUSE.
import Protocol
import Synchronization

/// A request as the router sees it: headers already received, body still to come.
struct HTTPRequest: Sendable {
    let method: String
    let path: String
    /// Header names lowercased.
    let headers: [String: String]
    /// Query arguments, percent-decoded.
    let query: [String: String]
    /// Header names (lowercased) sent more than once with different values; `headers`
    /// holds the last. RequestFraming.swift refuses the ones that delimit the body.
    var conflicting: Set<String> = []
    /// The client's IP address as text, and whether it is a loopback address.
    var client = ClientAddress.unknown
    /// What the router learned that the access log reports (the device).
    var note = RequestNote()

    func header(_ name: String) -> String? { headers[name.lowercased()] }
}

/// The peer of a connection, read once when it opens.
struct ClientAddress: Sendable {
    /// `192.0.2.7`, `2001:db8::1`; `-` when unknown.
    let text: String
    let isLoopback: Bool
    static let unknown = ClientAddress(text: "-", isLoopback: false)
}

/// Filled by the router while it routes (on the connection's thread), read by the
/// daemon once the reply is sent: the authenticated device's name, for the access log.
final class RequestNote: Sendable {
    private let value = Mutex<String?>(nil)
    var device: String? {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// A reply. File bodies are handed to libmicrohttpd, which closes the descriptor;
/// stream bodies are pulled from their reader as the socket drains, then closed.
struct HTTPResponse: Sendable {
    enum Body: Sendable {
        case bytes([UInt8])
        case file(fd: Int32, offset: Int64, length: Int64)
        case stream(length: Int64, reader: any BodyReader)
    }
    var status: Int
    var headers: [(String, String)]
    var body: Body

    init(status: Int, headers: [(String, String)] = [], body: Body = .bytes([])) {
        self.status = status; self.headers = headers; self.body = body
    }

    static func json<T: Encodable>(_ status: Int, _ value: T, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: .bytes(WireJSON.encode(value)))
    }

    static func empty(_ status: Int, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers)
    }

    /// An error reply with a JSON body naming what was wrong (and the field, if any).
    static func error(_ status: Int, _ code: String, _ message: String, field: String? = nil, headers: [(String, String)] = []) -> HTTPResponse {
        json(status, ErrorResponse(error: code, message: message, field: field), headers: headers)
    }

    func adding(_ extra: [(String, String)]) -> HTTPResponse {
        var copy = self
        copy.headers += extra
        return copy
    }
}

/// Receives a request body as it arrives: `receive` on the connection's epoll thread,
/// `finish` on a worker; never two calls at once.
protocol RequestBody: AnyObject {
    /// One chunk of the body; the buffer is valid only during the call.
    func receive(_ chunk: UnsafeRawBufferPointer)
    /// The whole body arrived; returns the reply.
    func finish() -> HTTPResponse
    /// The client went away (or the server is stopping) before the body ended.
    func abort()
}

/// The source of a streamed reply body (bytes assembled from several files). Called on
/// the connection's thread only, at increasing positions; `close` is called exactly
/// once, when libmicrohttpd drops the reply (sent, aborted, or a HEAD).
protocol BodyReader: AnyObject, Sendable {
    /// Fills `buffer` with the bytes from `position`; returns how many (> 0), or nil on a
    /// read error (the connection is then closed: the client sees a short body).
    func read(at position: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int?
    func close()
}

/// What the router decided after the headers.
enum Route {
    case respond(HTTPResponse)
    case read(RequestBody)
    /// Answered later by an event (`HeldRequest.answer`, from any thread): the connection
    /// is suspended meanwhile and costs no thread. For requests without a body. The
    /// closure is called on the epoll thread with the held request: it registers it
    /// where the event will find it, and must not block.
    case hold(@Sendable (HeldRequest) -> Void)
}

/// The request handler the daemon calls.
protocol HTTPHandler: AnyObject, Sendable {
    func route(_ request: HTTPRequest) -> Route
}

/// A request the daemon is done with, as the access log and the metrics see it.
struct FinishedRequest: Sendable {
    /// How it ended.
    enum End: String, Sendable {
        /// The reply was sent whole.
        case sent
        /// The client went away, or a read or write failed, before the reply was sent.
        case clientGone = "client_gone"
        /// No byte moved either way for the idle timeout.
        case timeout
        /// The server stopped under it.
        case stopping
        /// Closed by the connection guard: its body brought less than the minimum per window.
        case bodyDeadline = "body_deadline"
        /// Closed by the connection guard: no whole header within the deadline on a
        /// connection that had no request yet (no request: method and route are `-`).
        case headerDeadline = "header_deadline"
        /// The same deadline after at least one reply: an idle keep-alive (or a next
        /// header too slow).
        case keepAliveDeadline = "keepalive_deadline"
    }
    /// nil for a connection closed before a request's header was whole.
    var method: String?
    var route: RoutePattern?
    /// 0 when no reply was queued.
    var status: Int
    /// Body bytes received, and the reply body's length as queued (0 for HEAD).
    var bytesIn: Int64
    var bytesOut: Int64
    /// From the header's arrival (or the connection's last reply) to the end.
    var microseconds: Int64
    var device: String?
    var client: ClientAddress
    var end: End
}

/// Told of every request once it ends (after the reply is sent), on the connection's
/// thread: must not block.
protocol RequestObserver: Sendable {
    func finished(_ request: FinishedRequest)
}

/// A body read and dropped, then answered with `reply`: a refusal decided from the
/// headers (another request is writing this upload) reaches the client as its status.
/// Answered before the body is read, the connection would be closed under a client
/// still sending, which then sees a broken connection instead of the refusal.
final class DiscardedBody: RequestBody {
    private let reply: HTTPResponse
    init(reply: HTTPResponse) { self.reply = reply }
    func receive(_ chunk: UnsafeRawBufferPointer) {}
    func finish() -> HTTPResponse { reply }
    func abort() {}
}

/// A request body that is read, bounded, into memory (JSON calls), then handed to `handle`.
final class BufferedBody: RequestBody {
    private var bytes: [UInt8] = []
    private var overflow = false
    let limit: Int
    private let handle: ([UInt8]) -> HTTPResponse

    init(limit: Int, handle: @escaping ([UInt8]) -> HTTPResponse) {
        self.limit = limit
        self.handle = handle
    }

    func receive(_ chunk: UnsafeRawBufferPointer) {
        if overflow { return }
        if bytes.count + chunk.count > limit {
            overflow = true
            bytes = []
            return
        }
        bytes.append(contentsOf: chunk)
    }

    func finish() -> HTTPResponse {
        if overflow {
            return .error(413, "body_too_large", "the JSON body is larger than \(limit) bytes; send fewer items per call")
        }
        return handle(bytes)
    }

    func abort() {}
}
