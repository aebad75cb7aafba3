import Crypto
import Foundation
import Postgres
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// The server's garbage collection (`vdrive serve gc`, and the periodic job inside
/// `vdrive serve`): removes contents no version records and blocks nothing names
/// (BlockNames.swift), once they are older than the grace period.
///
/// The rule is the drive's: a block goes only if nothing names it at the moment of
/// removal. Each content and each block is decided in a transaction of its own that
/// deletes its row only if it is still unnamed (the re-check is the `DELETE`'s own
/// condition), and for a block leaves a marker (`block_removals`) that stands while its
/// bytes are removed; recorders refuse a block with a marker. A kill mid-sweep leaves
/// at worst a marker with or without its bytes, finished by the next run; never a row
/// without its bytes. Docs/architecture.md, "The server's garbage collection", has the
/// argument.
///
/// With a store devices PUT to themselves (an object store, `BlockStore.presigned`) it
/// also removes *orphan objects*: a block's object a device PUT with its presigned URL
/// and never verified, so no `blocks` row names it. Each is
/// decided like a block (its marker is inserted only if no row names it, in a
/// transaction of its own; then the object goes; then the marker), once its
/// `LastModified` is older than the grace: a verify arriving meanwhile is refused while
/// the marker stands, and the device PUTs the block again.
///
/// One collection runs at a time per workspace: a PostgreSQL advisory lock held on a
/// connection of its own (released if the process dies), or with SQLite a lock on
/// `gc.lock` in the data folder (every process of an SQLite workspace shares the folder).
public final class SpaceCollector: Sendable {
    /// What a run did (or, dry, would do).
    public struct Report: Sendable, Equatable {
        public var contents = 0
        public var blocks = 0
        public var bytes: Int64 = 0
        /// Orphan objects (object store only) and their bytes.
        public var objects = 0
        public var objectBytes: Int64 = 0
        /// Removals a killed run left, finished by this one.
        public var finished = 0
        public var dryRun = false
        public init(contents: Int = 0, blocks: Int = 0, bytes: Int64 = 0, objects: Int = 0, objectBytes: Int64 = 0, finished: Int = 0, dryRun: Bool = false) {
            self.contents = contents; self.blocks = blocks; self.bytes = bytes; self.objects = objects; self.objectBytes = objectBytes
            self.finished = finished; self.dryRun = dryRun
        }
    }

    /// Another collection holds the lock.
    public struct Busy: Error, CustomStringConvertible {
        public var description: String { "another garbage collection of this workspace is running; try again when it ends" }
    }

    let metadata: Metadata
    let blocks: any BlockStore
    let dataDirectory: String

    init(metadata: Metadata, blocks: any BlockStore, dataDirectory: String) {
        self.metadata = metadata; self.blocks = blocks; self.dataDirectory = dataDirectory
    }

    /// For `vdrive serve gc` and `usage`: the data folder's records and blocks, opened
    /// without the server's recovery (a server may be running on them).
    public convenience init(_ configuration: ServerConfiguration) throws(ServerError) {
        let blobs: BlobStore
        do { blobs = try BlobStore(root: configuration.blobRoot) }
        catch let e as Errno { throw .dataFolder(configuration.blobRoot, e) } catch { throw .dataFolder(configuration.blobRoot, .ioError) }
        let metadata = try Metadata(location: configuration.records, blobRoot: configuration.blobRoot)
        self.init(metadata: metadata, blocks: try configuration.store.open(folder: blobs),
                  dataDirectory: configuration.dataDirectory)
    }

    /// Removes what nothing names and is older than `grace` seconds (dry: counts it,
    /// removes nothing). Throws `Busy` when another collection runs.
    public func collect(grace: Int64, dryRun: Bool = false, now: Int64 = Int64(time(nil))) throws -> Report {
        let cutoff = Self.cutoff(now: now, grace: grace)
        if dryRun {
            let (count, bytes) = try forecast(cutoff: cutoff)
            var report = Report(contents: try collectableContents(cutoff: cutoff).count, blocks: count, bytes: bytes, dryRun: true)
            try sweepOrphanObjects(cutoff: cutoff, now: now, dryRun: true, into: &report)
            return report
        }
        guard let report = try exclusively({ try sweep(cutoff: cutoff, now: now) }) else { throw Busy() }
        return report
    }

    /// `now - grace`, saturated (a grace is whatever an operator typed).
    static func cutoff(now: Int64, grace: Int64) -> Int64 {
        let (value, overflow) = now.subtractingReportingOverflow(max(0, grace))
        return overflow ? .min : value
    }

    /// The blocks a collection with `cutoff` would remove now, and their bytes.
    func forecast(cutoff: Int64) throws -> (Int, Int64) {
        try metadata.withSession { db in
            try db.queryOne("""
                SELECT COUNT(*), COALESCE(SUM(b.size), 0) FROM blocks b
                WHERE b.created_at <= ?1 AND NOT \(BlockNames.blockKept("b.hash", cutoff: "?1"))
                """, cutoff) { ($0.int(0), $0.int64(1)) } ?? (0, 0)
        }
    }

    private func collectableContents(cutoff: Int64) throws -> [String] {
        try metadata.withSession { db in
            try db.query("SELECT c.hash FROM contents c WHERE c.created_at <= ? AND NOT \(BlockNames.contentNamed("c.hash"))", cutoff) { $0.string(0) ?? "" }
        }
    }

    private func sweep(cutoff: Int64, now: Int64) throws -> Report {
        var report = Report()
        report.finished = try finishLeftovers()
        for hash in try collectableContents(cutoff: cutoff) {
            let gone = try metadata.withSession { db in
                try db.transaction { () throws -> Bool in
                    guard try db.run("DELETE FROM contents WHERE hash = ? AND created_at <= ? AND NOT \(BlockNames.contentNamed("contents.hash"))", hash, cutoff) == 1 else { return false }
                    try db.run("DELETE FROM content_blocks WHERE content = ?", hash)
                    return true
                }
            }
            if gone { report.contents += 1 }
        }
        let candidates = try metadata.withSession { db in
            try db.query("SELECT b.hash, b.size FROM blocks b WHERE b.created_at <= ?1 AND NOT \(BlockNames.blockKept("b.hash", cutoff: "?1"))", cutoff) {
                ($0.string(0) ?? "", $0.int64(1))
            }
        }
        let pause = Self.pauseForTests
        for (hash, size) in candidates {
            // Decided again here, against the rows as they are now: named since, it stays.
            let taken = try metadata.withSession { db in
                try db.transaction { () throws -> Bool in
                    guard try db.run("DELETE FROM blocks WHERE hash = ? AND created_at <= ? AND NOT \(BlockNames.blockNamed("blocks.hash"))", hash, cutoff) == 1 else { return false }
                    try db.run("DELETE FROM block_chunks WHERE hash = ?", hash)
                    // A completed upload of it would answer "done" to the next upload of these bytes.
                    try db.run("DELETE FROM uploads WHERE hash = ? AND completed_at IS NOT NULL", hash)
                    try db.run("INSERT INTO block_removals(hash, started_at) VALUES (?, ?) ON CONFLICT DO NOTHING", hash, now)
                    return true
                }
            }
            guard taken else { continue }
            if pause > 0 { usleep(pause) }
            try removeBytes(hash)
            report.blocks += 1
            report.bytes += size
        }
        try sweepOrphanObjects(cutoff: cutoff, now: now, dryRun: false, into: &report)
        return report
    }

    /// The bucket's block objects no row names, last written at or before `cutoff`:
    /// listed a page (1,000 keys) at a time, narrowed by one query per page, then each
    /// decided in the transaction that inserts its marker (the `INSERT`'s own condition,
    /// against the rows as they are then); its object is removed, then its marker. An
    /// object whose age the store does not give is kept. A store only the server writes
    /// to has no orphans: nothing to do.
    private func sweepOrphanObjects(cutoff: Int64, now: Int64, dryRun: Bool, into report: inout Report) throws {
        guard let presigned = blocks.presigned else { return }
        let pause = Self.pauseForTests
        var after: String? = nil
        while true {
            let page = try presigned.page(after: after)
            after = page.next
            var old: [String: Int64] = [:]
            for block in page.blocks {
                guard let modified = block.modified, modified <= cutoff else { continue }
                old[block.digest.hex] = block.size
            }
            let orphans = try unnamedObjects(Array(old.keys))
            for hash in orphans.sorted() {
                let size = old[hash] ?? 0
                if dryRun {
                    report.objects += 1
                    report.objectBytes += size
                    continue
                }
                let taken = try metadata.withSession { db in
                    try db.transaction { () throws -> Bool in
                        try db.run("""
                            INSERT INTO block_removals(hash, started_at) SELECT CAST(?1 AS TEXT), CAST(?2 AS BIGINT)
                            WHERE NOT EXISTS (SELECT 1 FROM blocks ob WHERE ob.hash = ?1) AND NOT \(BlockNames.blockNamed("?1"))
                            ON CONFLICT DO NOTHING
                            """, hash, now) == 1
                    }
                }
                guard taken else { continue }
                if pause > 0 { usleep(pause) }
                try removeBytes(hash)
                report.objects += 1
                report.objectBytes += size
            }
            if !page.more || after == nil { return }
        }
    }

    /// Of the block hashes `hashes`, those no row names now: no block row, no content
    /// listing them, no upload in progress of them, no removal under way.
    private func unnamedObjects(_ hashes: [String]) throws -> [String] {
        guard !hashes.isEmpty else { return [] }
        return try metadata.withSession { db in
            let list = db.hashTable(hashes)
            return try db.query("""
                SELECT j.value FROM \(list.sql) WHERE NOT EXISTS (SELECT 1 FROM blocks ob WHERE ob.hash = j.value)
                AND NOT EXISTS (SELECT 1 FROM block_removals orr WHERE orr.hash = j.value) AND NOT \(BlockNames.blockNamed("j.value"))
                """, list.argument) { $0.string(0) ?? "" }
        }
    }

    /// A killed run's markers: their rows are gone, their bytes may not be. Removes the
    /// bytes and the markers (the caller holds the lock). Returns how many.
    private func finishLeftovers() throws -> Int {
        let leftovers = try metadata.withSession { db in try db.query("SELECT hash FROM block_removals") { $0.string(0) ?? "" } }
        for hash in leftovers { try removeBytes(hash) }
        return leftovers.count
    }

    /// At a server's start: finishes what a killed run left, unless a run is going on.
    func finishLeftoversIfIdle() throws {
        _ = try exclusively { try finishLeftovers() }
    }

    /// Removes a marked block's bytes, then its marker (bytes already gone are fine).
    private func removeBytes(_ hash: String) throws {
        guard let digest = SHA256Digest(hex: hash) else { return }
        try blocks.remove(digest)
        try metadata.withSession { db in try db.run("DELETE FROM block_removals WHERE hash = ?", hash) }
    }

    /// `VDRIVE_GC_PAUSE_MS`: a pause between a block's marker and the removal of its
    /// bytes, so the crash tests can kill a run mid-sweep. Microseconds, at most 10 s.
    static var pauseForTests: UInt32 {
        guard let text = ProcessInfo.processInfo.environment["VDRIVE_GC_PAUSE_MS"], let ms = UInt32(text), ms <= 10_000 else { return 0 }
        return ms * 1000
    }

    /// Runs `body` holding the workspace's collection lock; nil when another holds it.
    func exclusively<T>(_ body: () throws -> T) throws -> T? {
        switch metadata.store.dialect {
        case .postgres:
            // A session lock on a connection of its own, kept for the whole run; the
            // sweep's statements borrow other connections.
            return try metadata.withSession { lockSession -> T? in
                let got = try lockSession.queryOne("SELECT pg_try_advisory_lock(\(Self.lockKey))") { $0.string(0) } ?? nil
                guard got == "t" else { return nil }
                defer { _ = try? lockSession.run("SELECT pg_advisory_unlock(\(Self.lockKey))") }
                return try body()
            }
        case .sqlite:
            let fd = open(dataDirectory + "/gc.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw Errno.current }
            defer { close(fd) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { return nil }
            return try body()
        }
    }

    /// The advisory lock's key (the migrations use another).
    static let lockKey: Int64 = 0x7664_7269_7665_6763  // "vdrivegc"
}
