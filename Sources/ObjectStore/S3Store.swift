import Crypto
import HTTPClient
#if canImport(Glibc)
import Glibc
#endif

/// Why a call to the object store failed.
public enum ObjectStoreError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No connection, or it broke mid-call: the store is down or restarting. Transient.
    case unreachable(String)
    /// The store refused the credentials or the signature (403). Check the keys and the clock.
    case denied(String)
    /// Any other status, with the store's message (its XML `Code` and `Message`).
    case http(status: Int, message: String)

    public var isTransient: Bool {
        switch self {
        case .unreachable: return true
        case .http(let status, _): return status >= 500 || status == 408 || status == 429
        case .denied: return false
        }
    }

    public var description: String {
        switch self {
        case .unreachable(let m): return "the object store is unreachable: \(m); check that it runs and the store's endpoint"
        case .denied(let m): return "the object store refused the request (403): \(m); check the access key, the secret and the clock"
        case .http(let status, let m): return "the object store answered \(status): \(m)"
        }
    }
}

/// A presigned request: the URL and the headers its user must send as they are (they are signed).
public struct PresignedRequest: Sendable, Equatable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var expires: Int64
    public init(method: String, url: String, headers: [(String, String)], expires: Int64) {
        self.method = method; self.url = url; self.headers = headers; self.expires = expires
    }
    public static func == (a: PresignedRequest, b: PresignedRequest) -> Bool {
        a.method == b.method && a.url == b.url && a.expires == b.expires
            && a.headers.map { $0.0 + ":" + $0.1 } == b.headers.map { $0.0 + ":" + $0.1 }
    }
}

/// One bucket of an S3-compatible store, reached with SigV4-signed calls over libcurl.
public final class S3Store: Sendable {
    public let location: S3Location
    private let credentials: S3Credentials
    private let connection: HTTPConnection
    /// Where a GET's bytes go when the caller only wants to see them (hash them): nothing kept.
    private let discard: Int32

    public init(location: S3Location, credentials: S3Credentials, timeouts: Timeouts = Timeouts()) {
        self.location = location; self.credentials = credentials
        self.connection = HTTPConnection(timeouts: timeouts)
        self.discard = open("/dev/null", O_WRONLY | O_CLOEXEC)
    }

    deinit { if discard >= 0 { close(discard) } }

    /// The object path of `key` (path style): `/bucket/key`.
    private func path(_ key: String) -> String { "/" + location.bucket + (key.isEmpty ? "" : "/" + key) }

    private func url(_ key: String, query: [(String, String)]) -> String {
        location.endpoint + SigV4.encode(path(key), keepSlash: true) + (query.isEmpty ? "" : "?" + SigV4.queryString(query))
    }

    /// Sends one header-signed call. `payloadHash` is the body's SHA-256 (hex).
    private func call(_ method: String, key: String, query: [(String, String)] = [], extraHeaders: [(String, String)] = [],
                      body: UnsafeRawBufferPointer? = nil, payloadHash: String = SHA256Hasher.digest([UInt8]()).hex,
                      sinkHook: ((UnsafeRawBufferPointer) -> Void)? = nil, now: Int64 = Int64(time(nil))) throws(ObjectStoreError) -> HTTPResult {
        let date = SigV4.amzDate(now)
        var headers = [("host", location.host), ("x-amz-content-sha256", payloadHash), ("x-amz-date", date)] + extraHeaders
        let request = SigV4.Request(method: method, path: path(key), query: query, headers: headers, payloadHash: payloadHash)
        headers.append(("Authorization", SigV4.authorization(request, amzDate: date, region: location.region, credentials: credentials)))
        // libcurl sends Host itself (the same value); `Expect:` empty: no 100-continue round trip.
        let lines = headers.filter { $0.0 != "host" }.map { "\($0.0): \($0.1)" } + ["Expect:"]
        do {
            if let body {
                return try connection.perform(method: method, url: url(key, query: query), headers: lines, bytes: body)
            }
            if let sinkHook {
                return try connection.perform(method: method, url: url(key, query: query), headers: lines, sink: discard, sinkHook: sinkHook)
            }
            return try connection.perform(method: method, url: url(key, query: query), headers: lines)
        } catch {
            switch error {
            case .unreachable(let message): throw .unreachable(message)
            case .timedOut: throw .unreachable("no answer in time (connect or low-speed timeout)")
            default: throw .unreachable(error.description)
            }
        }
    }

    private func failure(_ reply: HTTPResult) -> ObjectStoreError {
        let text = String(decoding: reply.body.prefix(600), as: UTF8.self)
        let message = [Self.element("Code", in: text), Self.element("Message", in: text)].compactMap { $0 }.joined(separator: ": ")
        if reply.status == 403 { return .denied(message.isEmpty ? "no details" : message) }
        return .http(status: reply.status, message: message.isEmpty ? "no details" : message)
    }

    /// Creates the bucket; one that exists already (ours) is fine.
    public func createBucket() throws(ObjectStoreError) {
        let reply = try call("PUT", key: "")
        if reply.status == 200 { return }
        if reply.status == 409, Self.element("Code", in: String(decoding: reply.body, as: UTF8.self)) == "BucketAlreadyOwnedByYou" { return }
        throw failure(reply)
    }

    /// Stores `bytes` as `key`; `sha256` is their digest, signed as the payload hash, so
    /// the store refuses other bytes.
    public func put(_ key: String, bytes: UnsafeRawBufferPointer, sha256: SHA256Digest) throws(ObjectStoreError) {
        let reply = try call("PUT", key: key, body: bytes, payloadHash: sha256.hex)
        guard reply.status == 200 else { throw failure(reply) }
    }

    /// The object's size, or nil when there is no such object.
    public func head(_ key: String) throws(ObjectStoreError) -> Int64? {
        let reply = try call("HEAD", key: key)
        if reply.status == 404 { return nil }
        guard reply.status == 200, let length = reply.header("Content-Length").flatMap({ Int64($0) }) else { throw failure(reply) }
        return length
    }

    /// Reads the whole object, handing each piece to `body` as it arrives (nothing is
    /// kept); returns its length, or nil when there is no such object.
    public func read(_ key: String, _ body: @escaping (UnsafeRawBufferPointer) -> Void) throws(ObjectStoreError) -> Int64? {
        let counter = Counter()
        let reply = try call("GET", key: key, sinkHook: { counter.count += Int64($0.count); body($0) })
        if reply.status == 404 { return nil }
        guard reply.status == 200 else { throw failure(reply) }
        return counter.count
    }

    /// Deletes the object (S3 answers 204 whether it existed or not).
    public func delete(_ key: String) throws(ObjectStoreError) {
        let reply = try call("DELETE", key: key)
        guard reply.status == 204 || reply.status == 200 else { throw failure(reply) }
    }

    /// The keys under `prefix` after `startAfter`, at most 1,000 per page; `more` when the list goes on.
    public func list(prefix: String, startAfter: String? = nil) throws(ObjectStoreError) -> (keys: [String], more: Bool) {
        let page = try listObjects(prefix: prefix, startAfter: startAfter)
        return (page.objects.map(\.key), page.more)
    }

    /// One object of a listing.
    public struct ListedObject: Sendable, Equatable {
        public var key: String
        public var size: Int64
        /// Unix seconds of its last write; nil when the store did not say.
        public var modified: Int64?
    }

    /// The objects under `prefix` after `startAfter` in key order, at most 1,000 per page
    /// (ListObjectsV2); `more` when the list goes on.
    public func listObjects(prefix: String, startAfter: String? = nil) throws(ObjectStoreError) -> (objects: [ListedObject], more: Bool) {
        var query = [("list-type", "2"), ("prefix", prefix)]
        if let startAfter { query.append(("start-after", startAfter)) }
        let reply = try call("GET", key: "", query: query)
        guard reply.status == 200 else { throw failure(reply) }
        let text = String(decoding: reply.body, as: UTF8.self)
        let objects = Self.elements("Contents", in: text).compactMap { entry -> ListedObject? in
            guard let key = Self.element("Key", in: entry) else { return nil }
            return ListedObject(key: key, size: Self.element("Size", in: entry).flatMap { Int64($0) } ?? 0,
                                modified: Self.element("LastModified", in: entry).flatMap(Self.unixSeconds))
        }
        return (objects, Self.element("IsTruncated", in: text) == "true")
    }

    /// `2026-11-30T12:15:03.000Z` (S3's LastModified; the fraction optional) as Unix seconds.
    static func unixSeconds(_ text: String) -> Int64? {
        let digits = Array(text.utf8)
        guard digits.count >= 20, digits[4] == 0x2D, digits[7] == 0x2D, digits[10] == 0x54, digits[13] == 0x3A, digits[16] == 0x3A else { return nil }
        func number(_ from: Int, _ count: Int) -> Int32? { Int32(String(decoding: digits[from..<(from + count)], as: UTF8.self)) }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2) else { return nil }
        var parts = tm()
        parts.tm_year = year - 1900; parts.tm_mon = month - 1; parts.tm_mday = day
        parts.tm_hour = hour; parts.tm_min = minute; parts.tm_sec = second
        let seconds = timegm(&parts)
        return seconds == -1 ? nil : Int64(seconds)
    }

    /// A presigned PUT of `key`: the device must send exactly `length` bytes whose SHA-256
    /// is `sha256` (both headers are signed: `Content-Length` and `x-amz-checksum-sha256`,
    /// the base64 of the digest, which the store checks against the bytes it receives).
    public func presignPut(_ key: String, length: Int64, sha256: SHA256Digest, expiresIn: Int64, now: Int64 = Int64(time(nil))) -> PresignedRequest {
        let headers = [("content-length", String(length)), ("x-amz-checksum-sha256", Base64.encode(sha256.bytes))]
        return presign("PUT", key: key, headers: headers, expiresIn: expiresIn, now: now)
    }

    /// A presigned GET of `key` (a `Range` header may be added: it is not signed).
    public func presignGet(_ key: String, expiresIn: Int64, now: Int64 = Int64(time(nil))) -> PresignedRequest {
        presign("GET", key: key, headers: [], expiresIn: expiresIn, now: now)
    }

    private func presign(_ method: String, key: String, headers: [(String, String)], expiresIn: Int64, now: Int64) -> PresignedRequest {
        let expires = max(1, min(expiresIn, SigV4.maxExpiry))
        let request = SigV4.Request(method: method, path: path(key), headers: [("host", location.host)] + headers, payloadHash: SigV4.unsignedPayload)
        let query = SigV4.presignQuery(request, amzDate: SigV4.amzDate(now), expires: expires, region: location.region, credentials: credentials)
        return PresignedRequest(method: method, url: url(key, query: query), headers: headers, expires: now + expires)
    }

    static func element(_ name: String, in xml: String) -> String? { elements(name, in: xml).first }

    /// The text of every `<name>…</name>` (S3's XML replies are flat enough for this).
    static func elements(_ name: String, in xml: String) -> [String] {
        var out: [String] = []
        var rest = Substring(xml)
        while let open = rest.firstRange(of: "<\(name)>"), let close = rest[open.upperBound...].firstRange(of: "</\(name)>") {
            out.append(String(rest[open.upperBound..<close.lowerBound]))
            rest = rest[close.upperBound...]
        }
        return out
    }
}

/// `@unchecked Sendable`: touched only by the thread running the transfer.
private final class Counter: @unchecked Sendable { var count: Int64 = 0 }
