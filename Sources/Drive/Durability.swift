import Foundation
import Crypto
import Storage

/// Makes commits durable against power loss, like ext4's commit interval.
///
/// A commit (Catalog.commit) lands in the kernel's page cache: block files and
/// SQLite WAL frame. That survives a kill of the process, not a power cut. This
/// flusher, woken by commits, waits about a second to batch, then fsyncs the
/// blocks committed since its last run, then the WAL, and records the commit
/// generation it made durable (`durable_gen`). `fsync(2)` on a file runs the
/// same flush synchronously before it returns.
///
/// Ordering argument: a block row can reach the disk before its file (the kernel
/// writes the WAL whenever it likes), so after an unclean stop the blocks with a
/// generation above the recorded `durable_gen` are re-hashed before anything is
/// served; a missing or wrong one is marked damaged and reads of it fail with EIO.
/// Blocks at or below `durable_gen` were fsynced before that number was written.
/// `@unchecked Sendable`: mutable fields are guarded by `condition`.
final class Durability: @unchecked Sendable {
    private let catalog: Catalog
    private let blobs: BlobStore
    private let flusher = BackgroundThread(name: "vd-flusher")
    private var condition: NSCondition { flusher.condition }
    private let flushLock = NSLock()
    private var pendingBlocks: Set<SHA256Digest> = []
    private var metadataDirty = false
    /// The flusher's own connection to the catalog, for checkpoints (opened at first need).
    private var checkpointConnection: Database?
    let interval: TimeInterval

    init(catalog: Catalog, blobs: BlobStore, interval: TimeInterval = 1.0) {
        self.catalog = catalog
        self.blobs = blobs
        self.interval = interval
        catalog.withDatabaseUnchecked { $0.blocksStored = { [unowned self] digests in noteCommitted(digests) } }
    }

    func start() { flusher.start { [self] in run() } }

    /// Stops the flusher after one last flush.
    func stop() {
        flusher.stop()
        try? flushNow()
    }

    /// Wakes the flusher only when it sleeps for want of work: while it waits out its
    /// interval, a commit just joins the batch (a wake-up per commit was a context
    /// switch per file while unpacking a tree).
    func noteCommitted(_ digests: [SHA256Digest]) {
        condition.lock()
        pendingBlocks.formUnion(digests)
        if !metadataDirty {
            metadataDirty = true
            condition.signal()
        }
        condition.unlock()
    }

    func noteMetadataChanged() {
        condition.lock()
        if !metadataDirty {
            metadataDirty = true
            condition.signal()
        }
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while !metadataDirty && !flusher.stopping { condition.wait() }
            let stop = flusher.stopping
            condition.unlock()
            if stop { return }
            // Batch: let a burst of commits gather for one whole interval. Wait out the
            // deadline: a wake-up before it (a signal that raced with the flag) must not
            // end the batch, or the flusher would fsync after nearly every file (seen
            // once: one fdatasync and one fsync per file while tar unpacked an archive).
            if flusher.pause(interval) { return }
            do { try flushNow() } catch {
                DriveLog.error("background flush failed: \(error); will retry")
            }
            checkpoint()
        }
    }

    /// The WAL copied into the database file here, off the FUSE requests (a checkpoint
    /// in a commit copies up to the whole WAL and fsyncs twice while every request
    /// waits for the catalog: seen as a 0.6 s `truncate`). Small files' blocks make the
    /// WAL grow fast (their bytes are in it). Failures only delay it: logged, retried.
    /// Only the flusher's thread calls it.
    private func checkpoint() {
        do {
            if checkpointConnection == nil { checkpointConnection = try Database(path: catalog.databasePath) }
            try Catalog.checkpointPassively(checkpointConnection!)
        } catch {
            DriveLog.error("background checkpoint of the catalog failed: \(error); will retry")
        }
    }

    /// Above this many new blocks in one flush, `syncfs` replaces one fdatasync per block
    /// (measured: see Docs/benchmarks.md, tar x of a source tree).
    static let syncfsThreshold = 32

    /// Fsyncs every pending block file and the catalog, then records the durable generation.
    func flushNow() throws {
        flushLock.lock(); defer { flushLock.unlock() }
        // What fsync makes durable must be committed first (group commit), and every
        // block stored up to the generation recorded below must be among `digests`.
        let (generation, digests) = try catalog.generationForFlush { () -> Set<SHA256Digest> in
            condition.lock(); defer { condition.unlock() }
            let digests = pendingBlocks
            pendingBlocks.removeAll()
            metadataDirty = false
            return digests
        }
        do {
            if digests.count > Self.syncfsThreshold {
                // Many new blocks (an unpacked archive): one syncfs writes them all back
                // with one journal commit, like ext4's own commit interval.
                try FileIO.syncFileSystem(blobs.root)
                try syncCatalogFiles()
                try catalog.setMeta("durable_gen", generation)
                return
            }
            var folders = Set<String>()
            for d in digests {
                guard let fd = try? blobs.open(d) else { continue }   // removed again since: nothing to keep
                defer { FileIO.close(fd) }
                try FileIO.fdatasync(fd)
                folders.insert(String(d.hex.prefix(2)))
            }
            for f in folders { try FileIO.syncDirectory(blobs.root + "/" + f) }
            try syncCatalogFiles()
            try catalog.setMeta("durable_gen", generation)
        } catch {
            condition.lock()
            pendingBlocks.formUnion(digests)
            metadataDirty = true
            condition.unlock()
            throw error
        }
    }

    /// fsync of the WAL makes every committed transaction in it durable; the pack goes
    /// first, so that a durable row never names packed bytes that are not.
    private func syncCatalogFiles() throws {
        try catalog.pack.sync()
        for suffix in ["-wal", ""] {
            let path = catalog.databasePath + suffix
            guard let fd = try? FileIO.open(path, O_RDONLY) else { continue }
            defer { FileIO.close(fd) }
            try FileIO.fdatasync(fd)
        }
    }

    /// After an unclean stop: re-hash blocks newer than the last durable generation and
    /// mark the bad ones. Returns the paths of files whose content was lost. Each block is
    /// checked by its own hash, so only the damaged blocks of a file fail to read.
    func verifyAfterUncleanStop() throws -> [String] {
        let durable = try catalog.meta("durable_gen") ?? 0
        let report = try catalog.reading { db in try BlockAudit.run(db, blobs: blobs, pack: catalog.pack, newerThan: durable) }
        var lost: [String] = []
        for finding in report.findings {
            try catalog.markDamaged(finding.digest)
            lost += try catalog.pathsUsing(finding.digest)
        }
        return lost
    }
}

/// Log lines on stderr (the journal, under systemd; stamped in a log file: LogLine),
/// prefixed so they are easy to grep.
enum DriveLog {
    static func info(_ message: String) { write("vdrive: " + message) }
    static func error(_ message: String) { write("vdrive: error: " + message) }
    private static func write(_ line: String) { LogLine.write(line) }
}
