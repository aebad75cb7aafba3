import Foundation
import Synchronization
import Testing
import Crypto
import Storage
@testable import Backup
@_exported import TestSupport
@_exported import TestTraits

/// A fresh temp folder with a catalog database (backup tables migrated), a blob store,
/// a settings box and an in-memory server; removed by `remove()`.
final class Harness {
    let root: String
    let db: Database
    let blobs: BlobStore
    let queue: BackupQueue
    let server: InMemoryTransport
    let settings = SettingsBox(BackupSettings(cameraBackup: true))
    let clock = ManualClock()
    var nextSequence: Int64 = 1

    init(label: String = "backup") throws {
        root = FileManager.default.temporaryDirectory.path + "/vdrive-\(label)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        db = try Database(path: root + "/catalog.db")
        try db.execute("PRAGMA journal_mode=WAL")
        // The drive's own migrations run first in production; one stands in for them here.
        try db.migrate([Migration("drive-1-catalog", "CREATE TABLE files (inode INTEGER PRIMARY KEY, path TEXT)")]
                       + BackupSchema.migrations)
        blobs = try BlobStore(root: root + "/blobs")
        queue = BackupQueue(db: db)
        server = InMemoryTransport()
        server.setNow(clock.now)
    }

    func remove() { try? FileManager.default.removeItem(atPath: root) }

    var stateFolder: String { root + "/state" }
    var settingsPath: String { root + "/config/settings.json" }

    /// Stores `bytes` as the drive does (each non-zero 4 MiB block in the block store by
    /// its digest) and queues it as a camera-roll commit. `inode` defaults to a new one per
    /// commit; pass the same one for versions of one open file.
    @discardableResult
    func commit(_ bytes: [UInt8], path: String, mtime: Int64 = 1_700_000_000, inode: UInt64? = nil,
                settled: Bool = true) throws -> CameraRollCommit {
        let manifest = InMemoryTransport.manifest(of: bytes)
        for (index, digest) in manifest.blocks.enumerated() {
            let start = index * Blocks.size
            let block = bytes[start..<min(start + Blocks.size, bytes.count)]
            guard !Blocks.isZero(digest, length: block.count), !blobs.contains(digest) else { continue }
            let staging = try blobs.makeStagingFile()
            try block.withUnsafeBytes { try FileIO.pwrite(staging.fd, $0, at: 0) }
            FileIO.close(staging.fd)
            try blobs.adopt(stagingPath: staging.path, as: digest)
        }
        let item = CameraRollCommit(changeSequence: nextSequence, inode: inode ?? UInt64(100 + nextSequence), path: path,
                                    hash: manifest.content, size: Int64(bytes.count), mtime: mtime,
                                    blocks: manifest.blocks, settled: settled)
        nextSequence += 1
        try db.transaction {
            try db.run("INSERT OR REPLACE INTO files(inode, path) VALUES (?, ?)", item.inode, item.path)
            try BackupQueue.enqueue(in: db, item: item)
        }
        return item
    }

    /// Bytes the server received for the blocks of `commit` (re-sent bytes included).
    func bytesReceived(for commit: CameraRollCommit) -> Int64 {
        let byBlock = server.stats.bytesReceivedByBlock
        return Set(commit.blocks).reduce(0) { $0 + (byBlock[$1] ?? 0) }
    }

    /// An engine's configuration on this harness's queue, state and settings.
    var engineConfiguration: BackupEngine.Configuration {
        BackupEngine.Configuration(databasePath: db.path, stateFolder: stateFolder, settingsPath: settingsPath)
    }

    /// A worker on this harness. One block in flight by default, so outcomes come in
    /// queue order and reads happen on the calling thread; tests of the sender pool say so.
    func makeWorker(policy: BackupPolicy = noHoldPolicy,
                    shouldContinue: @escaping @Sendable () -> Bool = { true }, maxIntegrityFailures: Int = 3,
                    blocksInFlight: Int = 1, transport: BackupTransport? = nil) -> BackupWorker {
        let settings = self.settings
        let clock = self.clock
        return BackupWorker(db: db, transport: transport ?? server, blobs: blobs, stateFolder: stateFolder,
                            uploader: UploaderConfiguration(retry: RetryPolicy(maxIntegrityFailures: maxIntegrityFailures),
                                                            blocksInFlight: blocksInFlight),
                            settings: { settings.value }, policy: policy, shouldContinue: shouldContinue,
                            clock: { clock.now }, monotonic: { clock.now }, random: { 0.5 })
    }

    /// Drains with a worker that is stopped (as by an unmount) once a PATCH leaves the
    /// server holding `offset` bytes of a block; the lock is released as the process exit would.
    func drainStopping(atServerOffset offset: Int64) throws -> BackupWorker.DrainResult {
        let stop = StopFlag()
        server.setAfterPatch { if $0 >= offset { stop.set() } }
        defer { server.setAfterPatch(nil) }
        let worker = makeWorker(shouldContinue: { !stop.isSet })
        defer { worker.releaseLock() }
        return try worker.drain()
    }

    func item(_ commit: CameraRollCommit) throws -> BackupItem {
        try #require(try db.queryOne("SELECT \(BackupItem.columns) FROM backup_items WHERE change_sequence = ?",
                                     commit.changeSequence) { try BackupItem(row: $0) })
    }

    func state(_ commit: CameraRollCommit) throws -> BackupItemState { try item(commit).state }
}

/// The policy tests use when policy is not what they test: no battery, unmetered.
let noHoldPolicy = BackupPolicy(power: PowerProbe(root: "/nonexistent"), network: FixedNetworkProbe(metered: false))

/// A worker with backup on and no hold, for tests that bring their own transport.
func plainWorker(db: Database, transport: BackupTransport, blobs: BackupBlobSource, stateFolder: String,
                 blocksInFlight: Int = 1) -> BackupWorker {
    BackupWorker(db: db, transport: transport, blobs: blobs, stateFolder: stateFolder,
                 uploader: UploaderConfiguration(blocksInFlight: blocksInFlight), settings: { BackupSettings(cameraBackup: true) },
                 policy: noHoldPolicy, shouldContinue: { true })
}

final class SettingsBox: Sendable {
    private let storage: Mutex<BackupSettings>
    init(_ value: BackupSettings) { storage = Mutex(value) }
    var value: BackupSettings { storage.withLock { $0 } }
    func update(_ change: (inout BackupSettings) -> Void) { storage.withLock { change(&$0) } }
}

final class ManualClock: Sendable {
    private let storage = Mutex<Double>(2_000_000)
    var now: Double { storage.withLock { $0 } }
    func advance(_ seconds: Double) { storage.withLock { $0 += seconds } }
}

/// Deterministic pseudo-random bytes (a photo stand-in of any size), eight per step so
/// that files of several 4 MiB blocks stay quick to make in a debug build.
func testBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed &* 0x9E3779B97F4A7C15 | 1
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { raw in
        var i = 0
        while i < count {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            var word = state
            for _ in 0..<min(8, count - i) {
                raw[i] = UInt8(truncatingIfNeeded: word)
                word >>= 8
                i += 1
            }
        }
    }
    return out
}

/// 1 MiB, for sizes written as block fractions.
let MiB = 1 << 20

enum Fixtures {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures").path
    static func bytes(_ name: String) throws -> [UInt8] {
        try #require(FileManager.default.contents(atPath: folder + "/" + name)).map { $0 }
    }
}
