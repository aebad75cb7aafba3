import Foundation
import Synchronization
import Backup
import Crypto
import Drive
import Storage
import WorkspaceMirror

/// The drive's camera-roll commits, queued for backup in the commit's own transaction
/// (so a file is never committed without being queued), then the engine woken once
/// the transaction is visible.
final class BackupHook: CameraRollObserver {
    private let engine = Mutex<BackupEngine?>(nil)

    func attach(_ e: BackupEngine?) { engine.withLock { $0 = e } }

    func cameraRollChanged(_ change: CameraRollChange, in database: Database) throws {
        // Temporary names (.part, dot-files, rsync's .name.XXXXXX) are never queued: the
        // rename into the final name is recorded as a change of its own.
        guard CameraRollRules.isInCameraRoll(change.path) else { return }
        try BackupQueue.enqueue(in: database, item: CameraRollCommit(
            changeSequence: change.sequence, inode: change.ino, path: change.path, hash: change.hash,
            size: change.size, mtime: change.mtimeNanoseconds / 1_000_000_000,
            blocks: change.blocks, settled: change.settled))
    }

    func cameraRollSettled(inode: UInt64, in database: Database) throws -> Bool {
        try BackupQueue.settle(in: database, inode: inode) > 0
    }

    func cameraRollCommitted() {
        engine.withLock { $0 }?.wake()
    }
}

/// Tables that tie the drive's blocks to the backup queue, in the catalog database.
/// A queued item that is not done yet pins the blocks of its version: deleting or
/// overwriting the photo before its upload must not delete the bytes the upload needs.
enum WiringSchema {
    static let migrations: [Migration] = [
        Migration("wiring-1-backup-pins-blobs", """
        CREATE TRIGGER backup_pin_insert AFTER INSERT ON backup_items WHEN NEW.state != 'done'
        BEGIN UPDATE blobs SET refs = refs + 1 WHERE hash = NEW.hash; END;
        CREATE TRIGGER backup_pin_update AFTER UPDATE OF state ON backup_items
            WHEN (OLD.state = 'done') != (NEW.state = 'done')
        BEGIN
            UPDATE blobs SET refs = refs + (CASE WHEN NEW.state = 'done' THEN -1 ELSE 1 END) WHERE hash = NEW.hash;
        END;
        CREATE TRIGGER backup_pin_delete AFTER DELETE ON backup_items WHEN OLD.state != 'done'
        BEGIN UPDATE blobs SET refs = refs - 1 WHERE hash = OLD.hash; END;
        """),
        // Content in blocks (drive-002): queued items move from the old blob hash to the
        // content hash and block list (`legacy_blobs`, made by the drive's migration), and
        // pins move from the whole blob to each distinct block of the version (json_each
        // over the item's list; the same block twice in one file is pinned once, and
        // unpinned once). Then the emptied `blobs` table goes.
        Migration("wiring-2-backup-pins-blocks", """
        DROP TRIGGER IF EXISTS backup_pin_insert;
        DROP TRIGGER IF EXISTS backup_pin_update;
        DROP TRIGGER IF EXISTS backup_pin_delete;
        DROP TABLE IF EXISTS blobs;
        UPDATE backup_items
            SET blocks = (SELECT l.blocks FROM legacy_blobs l WHERE l.hash = backup_items.hash),
                hash = (SELECT l.content FROM legacy_blobs l WHERE l.hash = backup_items.hash)
            WHERE hash IN (SELECT hash FROM legacy_blobs);
        UPDATE blocks SET refs = refs + (
            SELECT count(*) FROM backup_items i
            WHERE i.state != 'done' AND EXISTS (SELECT 1 FROM json_each(i.blocks) j WHERE j.value = blocks.hash));
        CREATE TRIGGER backup_pin_insert AFTER INSERT ON backup_items WHEN NEW.state != 'done'
        BEGIN
            UPDATE blocks SET refs = refs + 1 WHERE hash IN (SELECT value FROM json_each(NEW.blocks));
        END;
        CREATE TRIGGER backup_pin_update AFTER UPDATE OF state ON backup_items
            WHEN (OLD.state = 'done') != (NEW.state = 'done')
        BEGIN
            UPDATE blocks SET refs = refs + (CASE WHEN NEW.state = 'done' THEN -1 ELSE 1 END)
            WHERE hash IN (SELECT value FROM json_each(NEW.blocks));
        END;
        CREATE TRIGGER backup_pin_delete AFTER DELETE ON backup_items WHEN OLD.state != 'done'
        BEGIN
            UPDATE blocks SET refs = refs - 1 WHERE hash IN (SELECT value FROM json_each(OLD.blocks));
        END;
        """, code: movePastItemsToContentHashes),
    ]

    /// Done items whose blob the drive no longer had (the photo deleted after its backup)
    /// are not in `legacy_blobs`. A blob of at most 4 MiB was its own single block, so its
    /// content hash is known without the bytes; a bigger one keeps its old hash (it is
    /// history: the server moved it forward itself).
    @Sendable static func movePastItemsToContentHashes(_ db: Database) throws {
        let rows = try db.query("""
            SELECT id, hash FROM backup_items
            WHERE blocks = '[]' AND size > 0 AND size <= ? AND hash NOT IN (SELECT content FROM legacy_blobs)
            """, Blocks.size) { ($0.int64(0), $0.string(1) ?? "") }
        for (id, hex) in rows {
            guard let old = SHA256Digest(hex: hex) else { continue }
            try db.run("UPDATE backup_items SET hash = ?, blocks = ? WHERE id = ?",
                       ContentHash.of(blocks: [old]).hex, "[\"\(old.hex)\"]", id)
        }
    }

    /// Every migration of the catalog database, in order: drive (built in), backup, wiring.
    static var catalogExtras: [Migration] { BackupSchema.migrations + migrations + MirrorSchema.migrations }
}
