import Synchronization
import Backup
import Crypto
import Drive
import Storage

/// What the server holds of this drive's files, for optimize storage (`ServerLedger`),
/// from the tables the backup queue and the workspace mirror keep in the catalog:
///
/// - a Camera Roll version is on the server when its backup item for that path and
///   content is `done`;
/// - a workspace file is when the mirror's synced tree (`mirror_nodes`) holds its inode
///   at a version the server acknowledged (> 0) with this very content, and no change
///   of it waits to go up (`mirror_dirty`): then the server's node has these bytes.
///
/// The drive asks; the rule lives here, so the drive knows neither table.
final class DriveLedger: ServerLedger {
    /// Synced files whose content the server said it lacks (a reset server): they stay
    /// local for the rest of the mount, and are not asked about again.
    private let lacking = Mutex<Set<Key>>([])
    private struct Key: Hashable { var ino: UInt64; var content: SHA256Digest }
    private let backup: BackupHook

    init(backup: BackupHook) { self.backup = backup }

    func isOnServer(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws -> Bool {
        if try database.queryOne("SELECT 1 FROM backup_items WHERE path = ? AND hash = ? AND state = 'done' LIMIT 1",
                                 path, content.hex, row: { _ in true }) ?? false {
            return true
        }
        if lacking.withLock({ $0.contains(Key(ino: ino, content: content)) }) { return false }
        return try database.queryOne("""
            SELECT 1 FROM mirror_nodes m
            WHERE m.ino = ? AND m.kind = 'file' AND m.version > 0 AND m.hash = ?
              AND NOT EXISTS (SELECT 1 FROM mirror_dirty d WHERE d.ino = m.ino)
            """, ino, content.hex, row: { _ in true }) ?? false
    }

    func serverLacks(ino: UInt64, path: String, content: SHA256Digest, in database: Database) throws {
        lacking.withLock { _ = $0.insert(Key(ino: ino, content: content)) }
        try backup.requeueDone(path: path, hash: content,
                               reason: "the server no longer holds this version (reset, or restored from an older copy): sent again", in: database)
    }
}
