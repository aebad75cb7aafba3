import Foundation
import Backup
import Crypto
import Drive
import Storage
import WorkspaceMirror

/// The `.backup/` folder on the mount and the `user.vdrive.*` attributes of real files,
/// generated from the backup queue, so `ls` and `cat` tell what is backed up:
///
///     .backup/status          one line: state, items and bytes left, rate, ETA, or why it waits
///     .backup/status.json     the same fields as JSON
///     .backup/pending/        one file per item not yet sent (also uploading/, done/, failed/);
///                             each file's content describes the item
///
/// Reads go through a connection of its own (WAL readers never block the drive's
/// writer). Listings are cached for a second, so `ls -l` of a large folder costs one
/// query, not one per entry.
/// `@unchecked Sendable`: the connection and the cache are used under `lock`.
final class BackupQueueTree: VirtualTree, @unchecked Sendable {
    let rootName = ".backup"
    let attributePrefix = "user.vdrive."

    private let lock = NSLock()
    private let db: Database
    private let status: @Sendable () -> BackupStatus
    /// The workspace mirror's status, when it runs (its line follows the backup's).
    var mirrorStatus: (@Sendable () -> MirrorStatus)?
    /// Why the mirror's last send of an inode failed (`MirrorEngine.failure(of:)`).
    var mirrorFailure: (@Sendable (UInt64) -> String?)?
    /// Whether a writable handle is open on an inode (the drive's `hasWriters`).
    var hasWriters: (@Sendable (UInt64) -> Bool)?
    /// What stays on this device although it is in the workspace (`MirrorEngine.localOnlyNames`).
    var mirrorLocalOnly: (@Sendable () -> [String])?
    /// The last listing of `not-synced` and when: a read asks for the content several
    /// times (size, then bytes), each a scan of the catalog.
    private var notSyncedCache: (at: Double, text: [UInt8])?
    /// Whether the mirror leaves an inode out of the workspace by its rules
    /// (`MirrorEngine.isExcluded`): every folder up to the root, the user's patterns.
    var mirrorExcludes: (@Sendable (UInt64) -> Bool)?
    private var cache: [BackupItemState: (at: Double, items: [String: BackupListing], names: [String])] = [:]

    init(catalogPath: String, status: @escaping @Sendable () -> BackupStatus) throws {
        db = try Database(path: catalogPath)
        try db.execute("PRAGMA query_only = 1")
        self.status = status
    }

    private static let files = ["status", "status.json"]
    /// With a mirror: what stays on this device although it is in the workspace.
    private static let notSynced = "not-synced"
    private var files: [String] { mirrorLocalOnly == nil ? Self.files : Self.files + [Self.notSynced] }

    func entries(in path: String) -> [VirtualEntry]? {
        if path.isEmpty {
            return BackupItemState.allCases.map { VirtualEntry(name: $0.rawValue, isDirectory: true) }
                + files.map { VirtualEntry(name: $0, isDirectory: false) }
        }
        guard let state = BackupItemState(rawValue: path) else { return nil }
        return listing(state).names.map { VirtualEntry(name: $0, isDirectory: false) }
    }

    func content(of path: String) -> [UInt8]? {
        switch path {
        case "status": return Array((status().line + (mirrorStatus.map { "\n" + $0().line } ?? "") + "\n").utf8)
        case "status.json": return Array(status().json()) + [0x0a]
        case Self.notSynced: return notSyncedText()
        default: break
        }
        let parts = path.split(separator: "/", maxSplits: 1).map(String.init)
        guard parts.count == 2, let state = BackupItemState(rawValue: parts[0]),
              let entry = listing(state).items[parts[1]] else { return nil }
        return Array(Self.describe(entry.item).utf8)
    }

    func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] {
        lock.lock(); defer { lock.unlock() }
        var sync: [String: [UInt8]] = [:]
        if mirrorStatus != nil {
            let name = String(path.split(separator: "/").last ?? "")
            let excluded = CameraRollRules.isInCameraRoll(path) || path == MirrorRules.cameraRoll || MirrorRules.isTemporary(name)
                || (mirrorExcludes?(ino) ?? false)
            let writing = hasWriters?(ino) ?? false
            let failure = mirrorFailure?(ino)
            if let state = try? MirrorFileState.of(ino: ino, name: name, excluded: excluded, hasWriters: writing, failure: failure, in: db) {
                sync[DriveFileSystem.syncAttribute] = Array(state.rawValue.utf8)
                if state == .failed, let failure { sync[DriveFileSystem.syncErrorAttribute] = Array(failure.utf8) }
            }
        }
        guard let hex = try? db.queryOne("SELECT content FROM inodes WHERE ino = ?", ino, row: { $0.string(0) }),
              let hex, let digest = SHA256Digest(hex: hex) else { return sync }
        // The content hash (SHA-256 of the 4 MiB block digests, Docs/protocol.md), not
        // sha256sum of the bytes: hence its own name.
        var out = sync
        out[DriveFileSystem.contentHashAttribute] = Array(digest.hex.utf8)
        if CameraRollRules.isInCameraRoll(path), let state = try? BackupQueue(db: db).fileState(hash: digest) {
            out[DriveFileSystem.backupAttribute] = Array(state.state.rawValue.utf8)
            if let reason = state.failureReason { out["user.vdrive.backup-error"] = Array(reason.utf8) }
        }
        return out
    }

    private func notSyncedText() -> [UInt8]? {
        guard let mirrorLocalOnly else { return nil }
        lock.lock(); defer { lock.unlock() }
        let now = Date().timeIntervalSince1970
        if let c = notSyncedCache, now - c.at < 2, now >= c.at { return c.text }
        let lines = mirrorLocalOnly()
        let text = Array((lines.isEmpty ? "" : lines.joined(separator: "\n") + "\n").utf8)
        notSyncedCache = (now, text)
        return text
    }

    private func listing(_ state: BackupItemState) -> (items: [String: BackupListing], names: [String]) {
        lock.lock(); defer { lock.unlock() }
        let now = Date().timeIntervalSince1970
        if let c = cache[state], now - c.at < 1 { return (c.items, c.names) }
        let list = (try? BackupQueue(db: db).listing(state)) ?? []
        var items: [String: BackupListing] = [:]
        for entry in list { items[entry.name] = entry }
        let names = list.map(\.name)
        cache[state] = (now, items, names)
        return (items, names)
    }

    static func describe(_ item: BackupItem) -> String {
        var lines = [
            "path: \(item.path)",
            "state: \(item.state.rawValue)\(item.linked ? " (already on the server: linked, nothing sent)" : "")",
            "content-hash: \(item.hash.hex)",
            "size: \(item.size)",
            "sent: \(item.bytesSent)",
            "change: \(item.changeSequence)",
        ]
        if let date = item.captureDate { lines.append("captured: \(date)\(item.captureSource.map { " (\($0))" } ?? "")") }
        if let reason = item.failureReason { lines.append("failed: \(reason)") }
        if let error = item.lastError, item.state != .done { lines.append("last error: \(error)") }
        return lines.joined(separator: "\n") + "\n"
    }
}
