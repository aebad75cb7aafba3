import Crypto
import Synchronization

/// A workspace server in memory, for fast tests of the uploader and the engine, with
/// fault injection. A test double, public so that the command line's tests can use it
/// too; production code never constructs one. It behaves like the real one where the uploader can tell: tus offsets
/// survive a dropped connection and an expired URL, chunks are checked against their
/// sha256, a blob is complete only when its bytes hash to its name, URLs expire.
public final class InMemoryTransport: BackupTransport, Sendable {
    public enum Operation: Sendable, Equatable {
        case presentHashes, createUpload, uploadOffset, patch, recordFile, watermark, setWatermark
    }

    public enum Fault: Sendable, Equatable {
        /// Connection refused (transient).
        case refuse
        /// HTTP 500 (transient).
        case serverError
        /// The server stops answering; the client's timeout fires (transient).
        case hang
        /// 403 (permanent).
        case forbidden
        /// The PATCH body is cut after this many bytes of the chunk (the server keeps them,
        /// as tus servers do), then the connection drops (transient).
        case dropAfter(bytes: Int)
        /// The upload completes, but the server stores other bytes (a broken proxy or
        /// disk) and acknowledges the offset anyway.
        case acknowledgeWrongBytes
    }

    public struct Stats: Sendable, Equatable {
        /// Every byte received in PATCH bodies, including re-sent ones.
        public var bytesReceived: Int64 = 0
        public var bytesReceivedByHash: [SHA256Digest: Int64] = [:]
        public var patches = 0
        public var creates = 0
        public var heads = 0
        /// PATCHes that carried the last byte of an upload.
        public var completions = 0
    }

    struct Upload {
        var hash: SHA256Digest
        var size: Int64
        var data: [UInt8] = []
    }

    struct State {
        var blobs: [SHA256Digest: [UInt8]] = [:]
        var uploads: [Int: Upload] = [:]
        /// URL → (upload id, expiry).
        var urls: [String: (id: Int, expiresAt: Double)] = [:]
        var nextID = 1
        var records: [Int64: FileRecord] = [:]
        var watermark: BackupWatermark?
        var faults: [(operation: Operation?, fault: Fault)] = []
        var stats = Stats()
        var now: Double = 1_000_000
        var urlLifetime: Double = 3600
    }

    private let state = Mutex(State())
    /// Called after each accepted PATCH with the upload's new offset (tests pause from here).
    private let afterPatch: Mutex<(@Sendable (Int64) -> Void)?> = Mutex(nil)
    /// Bytes per progress callback inside a PATCH.
    public let progressStep: Int

    public init(progressStep: Int = 64 * 1024) { self.progressStep = progressStep }

    // MARK: - Test controls

    public func inject(_ fault: Fault, on operation: Operation? = nil, times: Int = 1) {
        state.withLock { for _ in 0..<times { $0.faults.append((operation, fault)) } }
    }

    public func setAfterPatch(_ hook: (@Sendable (Int64) -> Void)?) { afterPatch.withLock { $0 = hook } }

    /// The server's clock (URL expiry); the uploader's clock is the test's own.
    public func setNow(_ now: Double) { state.withLock { $0.now = now } }
    public func setURLLifetime(_ seconds: Double) { state.withLock { $0.urlLifetime = seconds } }

    /// Every URL handed out so far stops working (as after their expiry time).
    public func expireAllURLs() { state.withLock { s in for key in s.urls.keys { s.urls[key]!.expiresAt = -1 } } }

    /// Puts a blob on the server directly (another device uploaded it).
    public func store(_ bytes: [UInt8]) { state.withLock { $0.blobs[SHA256Hasher.digest(bytes)] = bytes } }
    public func setServerWatermark(_ w: BackupWatermark?) { state.withLock { $0.watermark = w } }

    public var stats: Stats { state.withLock { $0.stats } }
    public var blobs: [SHA256Digest: [UInt8]] { state.withLock { $0.blobs } }
    public var records: [Int64: FileRecord] { state.withLock { $0.records } }
    public var storedWatermark: BackupWatermark? { state.withLock { $0.watermark } }
    /// The offset the server holds for the incomplete upload of `hash`, if any.
    public func pendingOffset(of hash: SHA256Digest) -> Int64? {
        state.withLock { s in s.uploads.values.first { $0.hash == hash }.map { Int64($0.data.count) } }
    }

    // MARK: - BackupTransport

    public func presentHashes(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        try state.withLock { s in
            try Self.takeFault(&s, .presentHashes)
            return Set(hashes.filter { s.blobs[$0] != nil })
        }
    }

    public func createUpload(hash: SHA256Digest, size: Int64) throws -> UploadTicket {
        try state.withLock { s in
            try Self.takeFault(&s, .createUpload)
            s.stats.creates += 1
            if s.blobs[hash] != nil { return .present }
            if size == 0 {
                // tus: an upload of length 0 is complete when created.
                guard hash == SHA256Hasher.digest([UInt8]()) else { throw BackupTransportError(.checksumMismatch, "460 empty upload") }
                s.blobs[hash] = []
                return .present
            }
            let id: Int
            if let existing = s.uploads.first(where: { $0.value.hash == hash && $0.value.size == size })?.key {
                id = existing
            } else {
                id = s.nextID
                s.nextID += 1
                s.uploads[id] = Upload(hash: hash, size: size)
            }
            let expiresAt = s.now + s.urlLifetime
            let url = "mem://uploads/\(id)?expires=\(Int(expiresAt))&n=\(s.urls.count)"
            s.urls[url] = (id, expiresAt)
            return .upload(url: url, offset: Int64(s.uploads[id]!.data.count), expiresAt: expiresAt)
        }
    }

    public func uploadOffset(url: String) throws -> Int64 {
        try state.withLock { s in
            try Self.takeFault(&s, .uploadOffset)
            s.stats.heads += 1
            let id = try Self.resolve(&s, url)
            return Int64(s.uploads[id]!.data.count)
        }
    }

    public func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
                      progress: (Int64) -> Bool) throws -> Int64 {
        // Faults and checks first, under the lock; the "transfer" with its progress
        // callbacks runs outside it, as a real request would.
        let (id, fault) = try state.withLock { s -> (Int, Fault?) in
            let fault = try Self.takeFault(&s, .patch)
            s.stats.patches += 1
            let id = try Self.resolve(&s, url)
            let upload = s.uploads[id]!
            if offset != Int64(upload.data.count) {
                throw BackupTransportError(.offsetConflict(serverOffset: Int64(upload.data.count)), "409 offset mismatch")
            }
            if offset + Int64(chunk.count) > upload.size {
                throw BackupTransportError(.permanent, "413 chunk runs past Upload-Length")
            }
            return (id, fault)
        }
        var limit = chunk.count
        if case .dropAfter(let bytes) = fault { limit = min(bytes, chunk.count) }
        var accepted = 0
        var cancelled = false
        while accepted < limit {
            let step = min(progressStep, limit - accepted)
            accepted += step
            if !progress(Int64(accepted)) { cancelled = true; break }
        }
        let received = Array(UnsafeRawBufferPointer(rebasing: chunk[0..<accepted]))
        let newOffset = try state.withLock { s -> Int64 in
            s.stats.bytesReceived += Int64(accepted)
            guard var upload = s.uploads[id] else { throw BackupTransportError(.notFound, "404 upload gone") }
            s.stats.bytesReceivedByHash[upload.hash, default: 0] += Int64(accepted)
            if accepted == chunk.count && SHA256Hasher.digest(received) != chunkSHA256 {
                throw BackupTransportError(.checksumMismatch, "460 chunk checksum mismatch")
            }
            upload.data += received
            s.uploads[id] = upload
            if Int64(upload.data.count) == upload.size {
                s.stats.completions += 1
                var stored = upload.data
                if fault == .acknowledgeWrongBytes, !stored.isEmpty { stored[stored.count / 2] ^= 0xFF }
                let actual = SHA256Hasher.digest(stored)
                s.uploads[id] = nil
                if fault == .acknowledgeWrongBytes {
                    s.blobs[actual] = stored  // filed under what it really is: not the right hash
                } else if actual != upload.hash {
                    throw BackupTransportError(.checksumMismatch, "460 upload does not hash to \(upload.hash.hex)")
                } else {
                    s.blobs[upload.hash] = stored
                }
            }
            return Int64(upload.data.count)
        }
        if cancelled { throw BackupTransportError(.cancelled, "cancelled") }
        if case .dropAfter = fault { throw BackupTransportError(.transient, "connection reset by peer") }
        afterPatch.withLock { $0 }?(newOffset)
        return newOffset
    }

    public func recordFile(_ record: FileRecord) throws {
        try state.withLock { s in
            try Self.takeFault(&s, .recordFile)
            guard s.blobs[record.hash] != nil else { throw BackupTransportError(.permanent, "409 no such blob") }
            s.records[record.changeSequence] = record
        }
    }

    public func watermark() throws -> BackupWatermark? {
        try state.withLock { s in
            try Self.takeFault(&s, .watermark)
            return s.watermark
        }
    }

    public func setWatermark(_ watermark: BackupWatermark) throws {
        try state.withLock { s in
            try Self.takeFault(&s, .setWatermark)
            s.watermark = watermark
        }
    }

    // MARK: - Internals

    /// Removes and applies the first fault for `operation`: throws it, or returns the
    /// PATCH-only faults for `patch` to act on.
    @discardableResult
    private static func takeFault(_ s: inout State, _ operation: Operation) throws -> Fault? {
        guard let index = s.faults.firstIndex(where: { $0.operation == nil || $0.operation == operation }) else { return nil }
        let fault = s.faults.remove(at: index).fault
        switch fault {
        case .refuse: throw BackupTransportError(.transient, "connection refused")
        case .serverError: throw BackupTransportError(.transient, "HTTP 500 from the server")
        case .hang: throw BackupTransportError(.transient, "operation timed out")
        case .forbidden: throw BackupTransportError(.permanent, "HTTP 403")
        case .dropAfter, .acknowledgeWrongBytes:
            if operation == .patch { return fault }
            throw BackupTransportError(.transient, "connection reset by peer")
        }
    }

    private static func resolve(_ s: inout State, _ url: String) throws -> Int {
        guard let entry = s.urls[url] else { throw BackupTransportError(.notFound, "404 unknown upload URL") }
        guard entry.expiresAt > s.now else { throw BackupTransportError(.expiredURL, "403 upload URL expired") }
        guard s.uploads[entry.id] != nil else { throw BackupTransportError(.notFound, "404 upload gone") }
        return entry.id
    }
}
