import Foundation
import Protocol
import Synchronization

/// What one client can make the server hold. Each is a count or a byte total, checked
/// before the work is taken on, so a client asking for more is refused (4xx, or 503 while
/// others hold the shared budget) instead of growing the server's threads, descriptors
/// or memory without end. Docs/operations.md, "Limits", lists them.
public struct ServerLimits: Sendable {
    /// Uploads whose trailing hasher (a thread and an open staging file) is kept between
    /// PATCHes; the least recently used beyond this is closed, and re-opened on its next
    /// PATCH (it reads back the bytes already received).
    public var openUploads: Int = 64
    /// New block uploads one `POST /v1/uploads` may start (413 beyond: 64 GiB of blocks).
    public var uploadsPerRequest: Int = 16_384
    /// Uploads in progress per device (429 beyond, until some complete, are deleted or expire).
    public var uploadsPerDevice: Int = 65_536
    /// Bytes of request bodies held in memory at once, over all connections (JSON bodies,
    /// blocks sent through a server with an object store). A body that would pass it waits
    /// for others: 503 with Retry-After. One body alone is always admitted (each is
    /// already bounded: `API.maxJSONBody`, `API.maxManifestBody`, a block).
    public var bufferedBytes: Int = 256 << 20

    public init() {}

    /// The ranges an operator may set (`vdrive serve --max-open-hashers` …): each bound
    /// keeps the server's threads, descriptors and memory what the limit means them to be.
    public static let openUploadsRange = 1...4096
    public static let uploadsPerRequestRange = 1...API.maxBlocksPerContent
    public static let uploadsPerDeviceRange = 1...(1 << 24)
    public static let bufferedBytesRange = (1 << 20)...(1 << 40)

    /// What is wrong with these limits, for the operator who typed them; nil when usable.
    public var problem: String? {
        if !Self.openUploadsRange.contains(openUploads) {
            return "the open hashers limit must be from \(Self.openUploadsRange.lowerBound) to \(Self.openUploadsRange.upperBound) (each is a thread and an open file), got \(openUploads)"
        }
        if !Self.uploadsPerRequestRange.contains(uploadsPerRequest) {
            return "the uploads per plan limit must be from 1 to \(API.maxBlocksPerContent) (the most blocks a content has), got \(uploadsPerRequest)"
        }
        if !Self.uploadsPerDeviceRange.contains(uploadsPerDevice) {
            return "the uploads per device limit must be from 1 to \(Self.uploadsPerDeviceRange.upperBound), got \(uploadsPerDevice)"
        }
        if uploadsPerDevice < uploadsPerRequest {
            return "the uploads per device limit (\(uploadsPerDevice)) must be at least the uploads per plan limit (\(uploadsPerRequest)), or a plan could never start"
        }
        if !Self.bufferedBytesRange.contains(bufferedBytes) {
            return "the body budget must be from 1M to 1T bytes, got \(bufferedBytes)"
        }
        return nil
    }
}

/// A byte budget shared by every connection (`ServerLimits.bufferedBytes`).
final class MemoryBudget: Sendable {
    private let total: Int
    private let used = Mutex(0)

    init(total: Int) { self.total = total }

    /// Takes `bytes` from the budget, or nil when they do not fit beside what is held.
    func reserve(_ bytes: Int) -> Reservation? {
        let granted = used.withLock { used -> Bool in
            guard used == 0 || bytes <= total - used else { return false }
            used += bytes
            return true
        }
        return granted ? Reservation(budget: self, bytes: bytes) : nil
    }

    fileprivate func give(_ bytes: Int) { used.withLock { $0 -= bytes } }

    var held: Int { used.withLock { $0 } }

    /// Bytes held for one body, given back exactly once: when the body ends, or when it is dropped.
    final class Reservation: Sendable {
        private let budget: MemoryBudget
        private let bytes: Int
        private let returned = Mutex(false)
        fileprivate init(budget: MemoryBudget, bytes: Int) { self.budget = budget; self.bytes = bytes }
        func release() {
            if returned.withLock({ r in defer { r = true }; return !r }) { budget.give(bytes) }
        }
        deinit { release() }
    }
}

/// A request body kept in memory until it ends; `memoryBound` is the most it keeps.
protocol BufferedInMemory: RequestBody {
    var memoryBound: Int { get }
}

extension BufferedBody: BufferedInMemory {
    var memoryBound: Int { limit }
}

extension ObjectPutBody: BufferedInMemory {
    var memoryBound: Int { Int(length) }
}

/// A buffered body holding its share of the budget until it ends.
final class BudgetedBody: RequestBody {
    private let inner: RequestBody
    private let reservation: MemoryBudget.Reservation
    init(_ inner: RequestBody, reservation: MemoryBudget.Reservation) { self.inner = inner; self.reservation = reservation }
    func receive(_ chunk: UnsafeRawBufferPointer) { inner.receive(chunk) }
    func finish() -> HTTPResponse {
        defer { reservation.release() }
        return inner.finish()
    }
    func abort() {
        inner.abort()
        reservation.release()
    }
}

extension ServerContext {
    /// `route` with a body kept in memory admitted against the shared budget: its declared
    /// length (or its bound, for a body of unknown length) is reserved until it ends.
    /// Over the budget the body is read and dropped, and the answer is 503 Retry-After.
    func admitting(_ request: HTTPRequest, _ route: Route) -> Route {
        guard case .read(let body) = route, let buffered = body as? BufferedInMemory else { return route }
        let bytes = min(buffered.memoryBound, request.contentLength.map { Int(clamping: $0) } ?? buffered.memoryBound)
        guard let reservation = memoryBudget.reserve(bytes) else {
            return .read(DiscardedBody(reply: .error(503, "busy", "the server holds as many request bodies in memory as it may (\(configuration.limits.bufferedBytes) bytes); send this again in a few seconds",
                                                     headers: [("Retry-After", "2")])))
        }
        return .read(BudgetedBody(body, reservation: reservation))
    }

    /// The 413 or 429 when a plan of the blocks `hashes` passes a limit for `device`: the
    /// plan's size per request, and the uploads it would add to the device's in progress
    /// (blocks with an upload already, a renewed plan's, add none); nil when it fits.
    func uploadLimitRefusal(hashes: [String], device: Metadata.Device) throws -> RequestFailure? {
        let limits = configuration.limits
        if hashes.count > limits.uploadsPerRequest {
            return RequestFailure(413, "too_many_uploads", "this plan needs \(hashes.count) block uploads; one request may start at most \(limits.uploadsPerRequest): upload the file in parts",
                                  field: "blocks")
        }
        // A server whose devices upload straight to its store keeps no uploads: nothing accumulates.
        guard !hashes.isEmpty, blocks.presigned == nil else { return nil }
        let newUploads = hashes.count - (try metadata.uploadCount(hashes))
        guard newUploads > 0 else { return nil }
        let inProgress = try metadata.uploadsInProgress(deviceID: device.id)
        if inProgress > limits.uploadsPerDevice - newUploads {
            return RequestFailure(.error(429, "too_many_uploads", "device '\(device.name)' has \(inProgress) uploads in progress and may have at most \(limits.uploadsPerDevice); finish or DELETE some, or wait for them to expire, then ask again",
                                         field: "blocks", headers: [("Retry-After", "60")]))
        }
        return nil
    }
}

extension Metadata {
    /// How many of the block hashes `hashes` have an upload (one statement).
    func uploadCount(_ hashes: [String]) throws -> Int {
        try withSession { db in
            let list = db.hashTable(hashes)
            return try db.queryOne("SELECT count(*) FROM \(list.sql) JOIN uploads u ON u.hash = j.value", list.argument) { $0.int(0) } ?? 0
        }
    }

    /// Uploads the device made that are not complete yet.
    func uploadsInProgress(deviceID: Int64) throws -> Int {
        try withSession { db in
            try db.queryOne("SELECT count(*) FROM uploads WHERE device_id = ? AND completed_at IS NULL", deviceID) { $0.int(0) } ?? 0
        }
    }
}
