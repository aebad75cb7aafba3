import Foundation
import Crypto
import Storage

/// What optimize storage needs to know of the server, asked on the catalog's own
/// connection (the backup queue and the workspace mirror keep their tables in the same
/// SQLite file). The drive imports neither: the daemon's wiring implements this, and
/// decides for each file what "on the server" means (a camera-roll version backed up, a
/// workspace file synced).
public protocol ServerLedger: AnyObject, Sendable {
    /// Whether version `content` of file `ino` (at `path`) is on the server now, so its
    /// blocks may be dropped here. Anything not known for sure (a backup pending or
    /// failed, a change not sent yet, a file the server never had) must answer false:
    /// such a file is never made online-only.
    func isOnServer(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws -> Bool

    /// The server answered that it does not hold version `content` of `path`, which the
    /// ledger counted as there (the server was reset, or restored from an older copy):
    /// send it again. Called in a write transaction on the catalog, committed at once;
    /// the change journals are told `committed` after it (the backup engine wakes).
    func serverLacks(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws
}

/// The cache bound: how many bytes of blocks the store may hold before the ones the
/// server can give back are dropped, least recently used first.
///
/// Evictable: blocks fetched from the server that no file names (cache); with optimize
/// storage, also blocks named only by files the ledger says the server holds (backed-up
/// Camera Roll versions, synced workspace files) that are not pinned (`user.vdrive.pin`
/// on the file or a folder above it): those files become online-only (the catalog keeps
/// their block lists; sizes, dates and xattrs do not change; a read fetches them back).
/// Never evicted: a block any other file names, a block a pending backup pins (its
/// reference count then exceeds the files counted), a damaged block.
public struct CacheBound: Sendable {
    public static let pinAttribute = "user.vdrive.pin"

    /// Bytes of blocks the server holds that may stay here (fetched blocks no file
    /// names, partial blocks, and with optimize storage unpinned files the server holds).
    public var bytes: Int64
    public var optimizeStorage: Bool
    public init(bytes: Int64, optimizeStorage: Bool) { self.bytes = bytes; self.optimizeStorage = optimizeStorage }
}

/// Bytes of the store by kind (for `vdrive status`).
public struct ResidencyTotals: Sendable, Equatable {
    /// Blocks files here name, held here.
    public var local: Int64
    /// Blocks fetched from the server that no file names, and chunks of partial blocks (cache).
    public var cached: Int64
    /// Blocks files here name that are only on the server.
    public var onlineOnly: Int64

    /// Read from a catalog another process may be using (`vdrive status`), read-only.
    public static func read(catalogPath: String) throws -> ResidencyTotals {
        let db = try Database(path: catalogPath, options: .init(readOnly: true, create: false))
        let t = try Catalog.residencyTotals(db)
        return ResidencyTotals(local: t.local, cached: t.cached, onlineOnly: t.onlineOnly)
    }
}

extension BlockCache {
    /// Evicts until what the server could give back fits `bound`: blocks fetched from it
    /// that no file names, partial blocks, and (optimize storage) the blocks of unpinned
    /// files the server holds (the originals). Blocks only this machine holds never
    /// count: a bound smaller than the local files does not make the cache churn. Returns
    /// the bytes dropped.
    @discardableResult
    public func enforce(_ bound: CacheBound, ledger: ServerLedger?) throws -> Int64 {
        flushUses()
        var originals: [Catalog.ResidentFile] = []
        if bound.optimizeStorage, let ledger {
            for f in try catalog.residentFiles(pinXattr: CacheBound.pinAttribute) where !f.pinned {
                if try catalog.reading({ try ledger.isOnServer(ino: f.ino, path: f.path, content: f.content, in: $0) }) { originals.append(f) }
            }
        }
        let partial = try catalog.partialBytes()
        var candidates = try evictable(originals: bound.optimizeStorage ? originals : nil)
        /// Bytes over the bound if every candidate and partial block counted.
        func excess() -> Int64 { candidates.reduce(partial) { $0 + $1.size } - bound.bytes }
        // Originals go only when the server confirms, now, that it holds them: a backup
        // marked done (or a file marked synced) on a server since reset or restored from
        // an older copy must not become the only copy it no longer is.
        if let ledger, !originals.isEmpty, excess() > 0 {
            let confirmed = try confirmOnServer(originals, ledger: ledger)
            if confirmed.count < originals.count {
                originals = confirmed
                candidates = try evictable(originals: confirmed)
            }
        }
        var over = excess()
        guard over > 0 else { return 0 }
        if partial > 0 {
            dropPartials()
            over -= partial
        }
        var dropped: Int64 = 0
        let onlyNamedBy = bound.optimizeStorage ? Set(originals.map(\.ino)) : nil
        for candidate in candidates where over > 0 {
            guard try exclusively(candidate.digest, { try catalog.evict(candidate.digest, onlyNamedBy: onlyNamedBy) }) else { continue }
            over -= candidate.size
            dropped += candidate.size
        }
        if dropped > 0 { DriveLog.info("cache bound \(bound.bytes) bytes: \(dropped) bytes of blocks the server holds were dropped (read again on demand)") }
        return dropped
    }

    /// Blocks that may go: fetched ones no file names, and those only `originals` name.
    private func evictable(originals: [Catalog.ResidentFile]?) throws -> [Catalog.EvictionCandidate] {
        try catalog.evictionCandidates(originals: originals.map { Set($0.map(\.ino)) }).filter { !isDamaged($0.digest) }
    }

    /// The originals whose content the server says it holds. None when it cannot be
    /// asked (no server, unreachable): they stay. Those it lacks are handed back to the
    /// ledger (sent again).
    private func confirmOnServer(_ originals: [Catalog.ResidentFile], ledger: ServerLedger) throws -> [Catalog.ResidentFile] {
        guard let remote else { return [] }
        let present: Set<SHA256Digest>
        do {
            present = try remote.presentContents(Array(Set(originals.map(\.content))))
            _ = isFirstConfirmationFailure(false)
        } catch {
            if isFirstConfirmationFailure(true) {
                DriveLog.info("optimize storage waits: the server could not confirm it holds the backed-up originals (\(error)); they stay local until it answers")
            }
            return []
        }
        let lacking = originals.filter { !present.contains($0.content) }
        if !lacking.isEmpty {
            try catalog.writingForLedger { db in
                for f in lacking { try ledger.serverLacks(ino: f.ino, path: f.path, content: f.content, in: db) }
            }
            DriveLog.error("the server does not hold \(lacking.count) file version(s) this drive had sent (was it reset, or restored from an older copy?): "
                           + "they stay local and are sent again, first \(lacking[0].path)")
        }
        return originals.filter { present.contains($0.content) }
    }

    /// Partial blocks go first when the store is over its bound: at most 4 MiB each, and
    /// the chunks a reader needs again are one request away.
    func dropPartials() {
        for name in (try? FileIO.listDirectory(partialRoot)) ?? [] {
            guard let d = SHA256Digest(hex: name) else { continue }
            try? exclusively(d) {
                _ = unlink(partialPath(d))
                try catalog.forgetPartial(d, chunkDigestsToo: false)
            }
        }
    }

    /// Local, cached and online-only bytes.
    public func totals() throws -> ResidencyTotals {
        let t = try catalog.residencyTotals()
        return ResidencyTotals(local: t.local, cached: t.cached, onlineOnly: t.onlineOnly)
    }
}
