import Foundation
import Synchronization
import Crypto
@testable import Backup

/// A model of a slow link around another transport: every call costs one round trip,
/// and PATCH bodies share one link of `bytesPerSecond` (first come, first served), so
/// requests in flight overlap their round trips but not their bytes. It measures what
/// the uploader's pipelining does for throughput; TCP itself (slow start, window) is the
/// loopback proxy's business in the benchmarks. It also records how many PATCHes were
/// in flight at once.
final class LinkTransport: BackupTransport, Sendable {
    let inner: BackupTransport
    let rtt: Double
    let bytesPerSecond: Double
    private let link = Mutex<(freeAt: Double, inFlight: Int, maxInFlight: Int)>((0, 0, 0))

    init(_ inner: BackupTransport, rtt: Double, bytesPerSecond: Double) {
        self.inner = inner; self.rtt = rtt; self.bytesPerSecond = bytesPerSecond
    }

    var maxPatchesInFlight: Int { link.withLock { $0.maxInFlight } }

    private func roundTrip() { usleep(UInt32(rtt * 1_000_000)) }

    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> { roundTrip(); return try inner.presentContents(hashes) }
    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan { roundTrip(); return try inner.createUpload(manifest) }
    func uploadOffset(url: String) throws -> Int64 { roundTrip(); return try inner.uploadOffset(url: url) }
    func recordFile(_ record: BackupRecord) throws { roundTrip(); try inner.recordFile(record) }
    func watermark() throws -> BackupWatermark? { roundTrip(); return try inner.watermark() }
    func setWatermark(_ watermark: BackupWatermark) throws { roundTrip(); try inner.setWatermark(watermark) }

    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64 {
        let now = Clock.monotonic()
        // The body starts arriving half a round trip after the request leaves, takes its
        // turn on the link, and the answer comes back half a round trip after its last byte.
        let (begin, end) = link.withLock { l -> (Double, Double) in
            l.inFlight += 1
            l.maxInFlight = max(l.maxInFlight, l.inFlight)
            let begin = max(now + rtt / 2, l.freeAt)
            l.freeAt = begin + Double(chunk.count) / bytesPerSecond
            return (begin, l.freeAt)
        }
        defer { link.withLock { $0.inFlight -= 1 } }
        while true {
            let t = Clock.monotonic()
            if t >= end + rtt / 2 { break }
            let sent = t <= begin ? 0 : min(Double(chunk.count), (t - begin) * bytesPerSecond)
            if !progress(Int64(sent)) { throw BackupTransportError(.cancelled, "cancelled") }
            usleep(5_000)
        }
        return try inner.patch(url: url, offset: offset, chunk: chunk, chunkSHA256: chunkSHA256) { _ in true }
    }
}
