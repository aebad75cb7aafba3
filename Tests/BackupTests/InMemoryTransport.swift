import Crypto
import Synchronization
@testable import Backup

/// A workspace server in memory, for fast tests of the uploader and the engine, with
/// fault injection. A test double of this test target only. It behaves like the real one where the
/// uploader can tell (Docs/protocol.md): blocks are stored by their digest and checked
/// against it at their last byte; each missing block is a tus upload keyed by its hash,
/// whose offset survives a dropped connection and an expired URL; chunks are checked
/// against their sha256; zero blocks are never asked for; a content is recorded only when
/// its block list hashes to it and every non-zero block is stored; URLs expire.
final class InMemoryTransport: BackupTransport, Sendable {
    enum Operation: Sendable, Equatable {
        case presentContents, createUpload, uploadOffset, patch, recordFile, watermark, setWatermark
    }

    enum Fault: Sendable, Equatable {
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
        /// The block completes, but the server stores other bytes (a broken proxy or
        /// disk) and acknowledges the offset anyway.
        case acknowledgeWrongBytes
    }

    struct Stats: Sendable, Equatable {
        /// Every byte received in PATCH bodies, including re-sent ones.
        var bytesReceived: Int64 = 0
        /// The same, by block digest.
        var bytesReceivedByBlock: [SHA256Digest: Int64] = [:]
        var patches = 0
        var creates = 0
        var heads = 0
        var records = 0
        /// PATCHes that carried the last byte of a block.
        var completions = 0
    }

    struct Upload {
        var hash: SHA256Digest
        var length: Int64
        var data: [UInt8] = []
    }

    struct State {
        var blocks: [SHA256Digest: [UInt8]] = [:]
        var contents: [SHA256Digest: ContentManifest] = [:]
        /// Incomplete block uploads by block digest (the real server's key too).
        var uploads: [SHA256Digest: Upload] = [:]
        /// URL → (block digest, expiry).
        var urls: [String: (block: SHA256Digest, expiresAt: Double)] = [:]
        var records: [Int64: BackupRecord] = [:]
        var watermark: BackupWatermark?
        var faults: [(operation: Operation?, fault: Fault)] = []
        var stats = Stats()
        var now: Double = 1_000_000
        var urlLifetime: Double = 3600
    }

    private let state = Mutex(State())
    /// Called after each accepted PATCH with the block's new offset (tests pause from here).
    private let afterPatch: Mutex<(@Sendable (Int64) -> Void)?> = Mutex(nil)
    /// Bytes per progress callback inside a PATCH.
    let progressStep: Int

    init(progressStep: Int = 64 * 1024) { self.progressStep = progressStep }

    // MARK: - Test controls

    func inject(_ fault: Fault, on operation: Operation? = nil, times: Int = 1) {
        state.withLock { for _ in 0..<times { $0.faults.append((operation, fault)) } }
    }

    func setAfterPatch(_ hook: (@Sendable (Int64) -> Void)?) { afterPatch.withLock { $0 = hook } }

    /// The server's clock (URL expiry); the uploader's clock is the test's own.
    func setNow(_ now: Double) { state.withLock { $0.now = now } }
    func setURLLifetime(_ seconds: Double) { state.withLock { $0.urlLifetime = seconds } }

    /// Every URL handed out so far stops working (as after their expiry time).
    func expireAllURLs() { state.withLock { s in for key in s.urls.keys { s.urls[key]!.expiresAt = -1 } } }

    /// Puts a whole content on the server directly (another device uploaded it).
    func store(_ bytes: [UInt8]) {
        let manifest = Self.manifest(of: bytes)
        state.withLock { s in
            Self.forEachBlock(of: bytes) { digest, block in if !Self.isZero(block) { s.blocks[digest] = block } }
            s.contents[manifest.content] = manifest
        }
    }

    /// Puts one block on the server directly (part of another device's file).
    func storeBlock(_ bytes: [UInt8]) { state.withLock { $0.blocks[SHA256Hasher.digest(bytes)] = bytes } }

    /// Loses a stored block (a server-side collection racing an upload, a lost disk).
    func forgetBlock(_ hash: SHA256Digest) { state.withLock { _ = $0.blocks.removeValue(forKey: hash) } }

    func setServerWatermark(_ w: BackupWatermark?) { state.withLock { $0.watermark = w } }

    var stats: Stats { state.withLock { $0.stats } }
    var storedBlocks: [SHA256Digest: [UInt8]] { state.withLock { $0.blocks } }
    var records: [Int64: BackupRecord] { state.withLock { $0.records } }
    var storedWatermark: BackupWatermark? { state.withLock { $0.watermark } }

    /// A recorded content's bytes, assembled from its blocks (zeros for zero blocks), or
    /// nil when the server holds no such content (or lost a block of it).
    func content(_ hash: SHA256Digest) -> [UInt8]? {
        state.withLock { s in
            guard let manifest = s.contents[hash] else { return nil }
            var out: [UInt8] = []
            for (i, digest) in manifest.blocks.enumerated() {
                let length = Blocks.length(ofBlock: i, fileSize: manifest.size)
                if Blocks.isZero(digest, length: length) {
                    out += [UInt8](repeating: 0, count: length)
                } else {
                    guard let block = s.blocks[digest] else { return nil }
                    out += block
                }
            }
            return out
        }
    }

    /// The offset the server holds for the incomplete upload of block `hash`, if any.
    func pendingOffset(ofBlock hash: SHA256Digest) -> Int64? {
        state.withLock { s in s.uploads[hash].map { Int64($0.data.count) } }
    }

    // MARK: - BackupTransport

    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        try state.withLock { s in
            try Self.takeFault(&s, .presentContents)
            return Set(hashes.filter { s.contents[$0] != nil })
        }
    }

    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan {
        try state.withLock { s in
            try Self.takeFault(&s, .createUpload)
            s.stats.creates += 1
            guard manifest.isConsistent else { throw BackupTransportError(.permanent, "422 blocks do not hash to content") }
            if s.contents[manifest.content] != nil { return .present }
            let expiresAt = s.now + s.urlLifetime
            var plan: [BlockUpload] = []
            var listed = Set<SHA256Digest>()
            for (index, digest) in manifest.blocks.enumerated() {
                let length = Int64(Blocks.length(ofBlock: index, fileSize: manifest.size))
                guard !Blocks.isZero(digest, length: Int(length)), s.blocks[digest] == nil,
                      listed.insert(digest).inserted else { continue }
                if s.uploads[digest] == nil { s.uploads[digest] = Upload(hash: digest, length: length) }
                let url = "mem://blocks/\(digest.hex)?expires=\(Int(expiresAt))&n=\(s.urls.count)"
                s.urls[url] = (digest, expiresAt)
                plan.append(BlockUpload(index: index, hash: digest, length: length, url: url,
                                        offset: Int64(s.uploads[digest]!.data.count)))
            }
            return .blocks(plan, expiresAt: expiresAt)
        }
    }

    func uploadOffset(url: String) throws -> Int64 {
        try state.withLock { s in
            try Self.takeFault(&s, .uploadOffset)
            s.stats.heads += 1
            let block = try Self.resolve(&s, url)
            return Int64(s.uploads[block]!.data.count)
        }
    }

    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
                      progress: (Int64) -> Bool) throws -> Int64 {
        // Faults and checks first, under the lock; the "transfer" with its progress
        // callbacks runs outside it, as a real request would.
        let (block, fault) = try state.withLock { s -> (SHA256Digest, Fault?) in
            let fault = try Self.takeFault(&s, .patch)
            s.stats.patches += 1
            let block = try Self.resolve(&s, url)
            let upload = s.uploads[block]!
            if offset != Int64(upload.data.count) {
                throw BackupTransportError(.offsetConflict(serverOffset: Int64(upload.data.count)), "409 offset mismatch")
            }
            if offset + Int64(chunk.count) > upload.length {
                throw BackupTransportError(.permanent, "413 chunk runs past Upload-Length")
            }
            return (block, fault)
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
            s.stats.bytesReceivedByBlock[block, default: 0] += Int64(accepted)
            guard var upload = s.uploads[block] else { throw BackupTransportError(.notFound, "404 upload gone") }
            if accepted == chunk.count && SHA256Hasher.digest(received) != chunkSHA256 {
                throw BackupTransportError(.checksumMismatch, "460 chunk checksum mismatch")
            }
            upload.data += received
            s.uploads[block] = upload
            if Int64(upload.data.count) == upload.length {
                s.stats.completions += 1
                var stored = upload.data
                if fault == .acknowledgeWrongBytes, !stored.isEmpty { stored[stored.count / 2] ^= 0xFF }
                let actual = SHA256Hasher.digest(stored)
                s.uploads[block] = nil
                if fault == .acknowledgeWrongBytes {
                    s.blocks[actual] = stored  // filed under what it really is: not the block asked for
                } else if actual != block {
                    throw BackupTransportError(.checksumMismatch, "460 block does not hash to \(block.hex)")
                } else {
                    s.blocks[block] = stored
                }
            }
            return Int64(upload.data.count)
        }
        if cancelled { throw BackupTransportError(.cancelled, "cancelled") }
        if case .dropAfter = fault { throw BackupTransportError(.transient, "connection reset by peer") }
        afterPatch.withLock { $0 }?(newOffset)
        return newOffset
    }

    func recordFile(_ record: BackupRecord) throws {
        try state.withLock { s in
            try Self.takeFault(&s, .recordFile)
            s.stats.records += 1
            if s.contents[record.hash] == nil {
                let manifest = ContentManifest(content: record.hash, size: record.size, blocks: record.blocks)
                guard manifest.isConsistent else { throw BackupTransportError(.permanent, "422 blocks do not hash to content") }
                let missing = record.blocks.enumerated().filter { index, digest in
                    !Blocks.isZero(digest, length: Blocks.length(ofBlock: index, fileSize: record.size)) && s.blocks[digest] == nil
                }
                if !missing.isEmpty {
                    throw BackupTransportError(.missingBlocks, "409 missing_blocks: \(missing.map(\.element.hex).joined(separator: ","))")
                }
                s.contents[record.hash] = manifest
            }
            s.records[record.changeSequence] = record
        }
    }

    func watermark() throws -> BackupWatermark? {
        try state.withLock { s in
            try Self.takeFault(&s, .watermark)
            return s.watermark
        }
    }

    func setWatermark(_ watermark: BackupWatermark) throws {
        try state.withLock { s in
            try Self.takeFault(&s, .setWatermark)
            s.watermark = watermark
        }
    }

    // MARK: - Internals

    /// The manifest of bytes held in memory.
    static func manifest(of bytes: [UInt8]) -> ContentManifest {
        var blocks: [SHA256Digest] = []
        forEachBlock(of: bytes) { digest, _ in blocks.append(digest) }
        return ContentManifest(content: ContentHash.of(blocks: blocks), size: Int64(bytes.count), blocks: blocks)
    }

    static func forEachBlock(of bytes: [UInt8], _ body: (SHA256Digest, [UInt8]) -> Void) {
        var start = 0
        while start < bytes.count {
            let block = Array(bytes[start..<min(start + Blocks.size, bytes.count)])
            body(SHA256Hasher.digest(block), block)
            start += Blocks.size
        }
    }

    static func isZero(_ block: [UInt8]) -> Bool { block.allSatisfy { $0 == 0 } }

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

    private static func resolve(_ s: inout State, _ url: String) throws -> SHA256Digest {
        guard let entry = s.urls[url] else { throw BackupTransportError(.notFound, "404 unknown upload URL") }
        guard entry.expiresAt > s.now else { throw BackupTransportError(.expiredURL, "403 upload URL expired") }
        guard s.uploads[entry.block] != nil else { throw BackupTransportError(.notFound, "404 upload gone") }
        return entry.block
    }
}
