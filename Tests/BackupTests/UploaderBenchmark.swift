import Foundation
import Synchronization
import Testing
import Crypto
import Storage
@testable import Backup

/// A server that keeps nothing and checks nothing: it counts bytes and remembers which
/// contents were recorded, so the figures are the uploader's own cost (read, hand over).
final class DiscardingTransport: BackupTransport, Sendable {
    private let state = Mutex<(offsets: [String: Int64], complete: Set<SHA256Digest>, received: Int64)>(([:], [], 0))
    var received: Int64 { state.withLock { $0.received } }
    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        state.withLock { s in Set(hashes.filter { s.complete.contains($0) }) }
    }
    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan {
        state.withLock { s in
            if s.complete.contains(manifest.content) { return .present }
            let plan = manifest.blocks.enumerated().map { index, hash in
                let url = "null://\(hash.hex)"
                return BlockUpload(index: index, hash: hash, length: Int64(Blocks.length(ofBlock: index, fileSize: manifest.size)),
                                   url: url, offset: s.offsets[url] ?? 0)
            }
            return .blocks(plan, expiresAt: .infinity)
        }
    }
    func uploadOffset(url: String) throws -> Int64 { state.withLock { $0.offsets[url] ?? 0 } }
    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64 {
        _ = progress(Int64(chunk.count))
        return state.withLock { s in
            let end = offset + Int64(chunk.count)
            s.offsets[url] = end
            s.received += Int64(chunk.count)
            return end
        }
    }
    func recordFile(_ record: BackupRecord) throws { _ = state.withLock { $0.complete.insert(record.hash) } }
    func watermark() throws -> BackupWatermark? { nil }
    func setWatermark(_ watermark: BackupWatermark) throws {}
}

/// Prints figures; asserts nothing about speed. Run with
/// `VDRIVE_BENCH=1 swift test -c release --filter UploaderBenchmark`.
@Suite(.tags(.logic), .enabled(if: ProcessInfo.processInfo.environment["VDRIVE_BENCH"] == "1"))
struct UploaderBenchmark {
    @Test func uploaderCostPerGigabyte() throws {
        let h = try Harness(label: "bench"); defer { h.remove() }
        let photoSize = 3_000_000, photos = 300  // 900 MB of 3 MB "photos"
        for i in 0..<photos { try h.commit(testBytes(photoSize, seed: UInt64(1000 + i)), path: "Camera Roll/\(i).jpg") }
        let transport = DiscardingTransport()
        let worker = plainWorker(db: h.db, transport: transport, blobs: h.blobs, stateFolder: h.stateFolder)
        let readBefore = try threadReadBytes()
        let cpuBefore = threadCPUSeconds()
        let wallBefore = Clock.monotonic()
        _ = try worker.drain()
        let wall = Clock.monotonic() - wallBefore
        let cpu = threadCPUSeconds() - cpuBefore
        let read = try threadReadBytes() - readBefore
        let gb = Double(transport.received) / 1e9
        print("""
            uploader benchmark: \(photos) items × \(photoSize) B = \(String(format: "%.2f", gb)) GB sent
              wall \(String(format: "%.2f", wall)) s (\(String(format: "%.0f", gb * 1000 / wall)) MB/s)
              CPU \(String(format: "%.2f", cpu / gb)) s per GB (this thread)
              bytes read per byte sent \(String(format: "%.3f", Double(read) / Double(transport.received)))
            """)
        #expect(transport.received == Int64(photoSize * photos))
    }
}

/// Prints the CPU an idle engine uses (no queue, backup on): it should sleep in the
/// kernel. Run with `VDRIVE_BENCH=1 swift test --filter IdleEngineBenchmark`.
@Suite(.tags(.logic), .enabled(if: ProcessInfo.processInfo.environment["VDRIVE_BENCH"] == "1"))
struct IdleEngineBenchmark {
    @Test func idleEngineCPU() throws {
        let h = try Harness(label: "idle"); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: noHoldPolicy)
        try engine.start()
        defer { engine.stop() }
        try eventually("idle") { engine.status().state == .idle }
        let seconds = 10.0
        let before = processCPUSeconds()
        usleep(UInt32(seconds * 1_000_000))
        let used = processCPUSeconds() - before
        print("idle engine: \(String(format: "%.4f", used)) s CPU in \(Int(seconds)) s (\(String(format: "%.3f", used / seconds * 100))% of a core, whole test process)")
    }
}

func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

func threadCPUSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Throughput over a modelled home uplink (`LinkTransport`: 100 Mbit/s shared, 50 ms
/// round trip), as a fraction of what the link alone allows, with one block in flight and
/// with the default. Run with `VDRIVE_BENCH=1 swift test --filter LinkBenchmark`.
@Suite(.tags(.logic), .enabled(if: ProcessInfo.processInfo.environment["VDRIVE_BENCH"] == "1"))
struct LinkBenchmark {
    static let bytesPerSecond = 12.5e6
    static let rtt = 0.05

    @Test(arguments: [1, UploaderConfiguration().blocksInFlight])
    func photosAndAVideoOverASlowLink(_ blocksInFlight: Int) throws {
        for (label, sizes) in [("40 photos of 3 MB", Array(repeating: 3_000_000, count: 40)),
                               ("one 128 MiB video", [128 * MiB])] {
            let h = try Harness(label: "link"); defer { h.remove() }
            for (i, size) in sizes.enumerated() { try h.commit(testBytes(size, seed: UInt64(500 + i)), path: "Camera Roll/\(i).bin") }
            let link = LinkTransport(DiscardingTransport(), rtt: Self.rtt, bytesPerSecond: Self.bytesPerSecond)
            let worker = h.makeWorker(blocksInFlight: blocksInFlight, transport: link)
            let start = Clock.monotonic()
            #expect(try worker.drain() == .empty(nextDue: nil))
            let wall = Clock.monotonic() - start
            let total = Double(sizes.reduce(0, +))
            print("""
                link benchmark (\(blocksInFlight) in flight): \(label): \(String(format: "%.2f", wall)) s, \
                link alone \(String(format: "%.2f", total / Self.bytesPerSecond)) s, \
                \(String(format: "%.2f", total / Self.bytesPerSecond / wall))× the link's throughput, \
                \(link.maxPatchesInFlight) PATCHes in flight at most
                """)
        }
    }
}
