import Foundation
import Synchronization
import Backup
import Crypto
import Drive
import Storage
import WorkspaceMirror

/// The camera backup's follower of the drive's changes (ChangeJournal.swift). A file
/// committed, or renamed into place, at a path the camera roll's rule takes
/// (`CameraRollRules.isInCameraRoll`: media files under `Camera Roll/`, temporary names
/// never) is queued in the change's own transaction, so a file is never committed without
/// being queued; that transaction commits at once, and the engine is woken after it.
final class BackupHook: ChangeJournal {
    private let engine = Mutex<BackupEngine?>(nil)
    /// Something was queued or settled since the followers were last told of a commit: the
    /// engine wakes for that commit only (the others, a `tar x` elsewhere, wake nothing).
    private let queued = Atomic<Bool>(false)

    func attach(_ e: BackupEngine?) { engine.withLock { $0 = e } }

    func record(_ change: DriveChange, in database: Database) throws {
        // A rename into place counts as a commit under the final name: a copy under a
        // temporary name (.part, rsync's .name.XXXXXX) is queued once, when renamed.
        guard change.kind == .content || change.kind == .renamed,
              let path = try change.path(), CameraRollRules.isInCameraRoll(path),
              let version = try change.version() else { return }
        // An empty file renamed into place is a placeholder, not a photo yet.
        if change.kind == .renamed && version.size == 0 { return }
        try BackupQueue.enqueue(in: database, item: CameraRollCommit(
            changeSequence: try change.sequence(), inode: change.ino, path: path, hash: version.hash,
            size: version.size, mtime: version.mtimeNanoseconds / 1_000_000_000,
            blocks: version.blocks, settled: version.settled))
        // A photo is durable at its close, and the engine reads the queue on its own connection.
        change.commitAtOnce()
        queued.store(true, ordering: .relaxed)
    }

    /// A photo's blocks stay files whatever its size: the engine sends block files, and
    /// optimize storage can make only those online-only.
    func keepsBlockFiles(ino: UInt64, path: () throws -> String?) throws -> Bool {
        try path().map(CameraRollRules.isInCameraRoll) ?? false
    }

    func settled(ino: UInt64, in database: Database) throws -> Bool {
        guard try BackupQueue.settle(in: database, inode: ino) > 0 else { return false }
        queued.store(true, ordering: .relaxed)
        return true
    }

    /// Queues again a version the server lost (the ledger's `serverLacks`), in the drive's
    /// write transaction for the ledger; the engine wakes once it commits.
    func requeueDone(path: String, hash: SHA256Digest, reason: String, in database: Database) throws {
        _ = try BackupQueue(db: database).requeueDone(path: path, hash: hash, reason: reason)
        queued.store(true, ordering: .relaxed)
    }

    func committed() {
        guard queued.exchange(false, ordering: .relaxed) else { return }
        engine.withLock { $0 }?.wake()
    }
}

/// Tables that tie the drive's blocks to the backup queue, in the catalog database.
/// A queued item that is not done yet pins the blocks of its version: deleting or
/// overwriting the photo before its upload must not delete the bytes the upload needs.
public enum WiringSchema {
    public static let migrations: [Migration] = [
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
    public static var catalogExtras: [Migration] { BackupSchema.migrations + migrations + MirrorSchema.migrations }
}
