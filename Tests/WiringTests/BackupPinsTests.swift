import Testing
import Foundation
import Backup
import Crypto
import Drive
import Storage
import TestSupport
import TestTraits
@testable import DeviceWiring

/// Tier one: the backup's pins on the drive's blocks (`WiringSchema`'s triggers on
/// `backup_items`), on a real catalog with every migration a mount applies, the photos
/// written through the drive with `BackupHook` as its follower, no kernel. A block a
/// queued version names stays until that version's backup is done, whatever happens to
/// the file meanwhile; then the drive's next garbage pass may take it.
@Suite(.tags(.logic)) struct BackupPinsTests {
    /// A drive as a mount opens it, with the camera backup's follower.
    struct Workspace {
        let fs: DriveFileSystem
        /// The test's own connection to the catalog (the engine's side of the queue).
        let db: Database
        let cameraRoll: UInt64

        init(_ dir: TemporaryDirectory) throws {
            fs = try DriveFileSystem(statePath: dir.path + "/state", extraMigrations: WiringSchema.catalogExtras,
                                     rootFolders: [CameraRollRules.folderName])
            fs.addFollower(BackupHook())
            _ = try fs.recover()
            db = try Database(path: fs.catalogPath)
            cameraRoll = try fs.lookup(parent: 1, name: Array(CameraRollRules.folderName.utf8)).ino
        }

        /// Writes a photo into the Camera Roll and closes it: queued by the hook.
        func store(_ name: String, _ bytes: [UInt8]) throws {
            let (_, fh) = try fs.createAndOpen(parent: cameraRoll, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
            _ = try bytes.withUnsafeBytes { try fs.write(fh, $0, at: 0) }
            try fs.flush(fh)
            fs.release(fh)
        }

        /// Deletes a photo as `rm` does: the name goes, then the kernel forgets the inode
        /// (its one lookup, the create's), and with it the file's blocks.
        func remove(_ name: String) throws {
            let ino = try fs.lookup(parent: cameraRoll, name: Array(name.utf8)).ino
            try fs.unlink(parent: cameraRoll, name: Array(name.utf8))
            fs.forget(ino, count: 2)   // the create's lookup and this one
        }

        /// The newest queued item of a Camera Roll photo.
        func item(_ name: String) throws -> BackupItem {
            try #require(try BackupQueue(db: db).latestItem(path: CameraRollRules.folderName + "/" + name))
        }

        /// What pins a block beyond the files that name it: `refs` less its `file_blocks` rows.
        func pins(_ block: SHA256Digest) throws -> Int64 {
            try #require(try db.queryOne("""
                SELECT refs - (SELECT count(*) FROM file_blocks f WHERE f.hash = blocks.hash) FROM blocks WHERE hash = ?
                """, block.hex) { $0.int64(0) })
        }

        /// Whether the block's row and its file are here.
        func stored(_ block: SHA256Digest) throws -> (row: Bool, file: Bool) {
            (try db.queryOne("SELECT 1 FROM blocks WHERE hash = ?", block.hex) { _ in true } ?? false,
             FileManager.default.fileExists(atPath: fs.blobStore.path(for: block)))
        }

    }

    @Test func aDeletedPhotosBlocksStayUntilItsBackupIsDone() throws {
        let dir = TemporaryDirectory("vdrive-pins"); defer { dir.remove() }
        let w = try Workspace(dir); defer { w.fs.shutdown() }
        try w.store("IMG_1.jpg", randomBytes(Blocks.size + 1000, seed: 1))   // two blocks
        let item = try w.item("IMG_1.jpg")
        #expect(item.state == .pending)
        let blocks = item.commit.blocks
        #expect(blocks.count == 2)
        for block in blocks { #expect(try w.pins(block) == 1, "a queued version pins each of its blocks once") }

        try w.remove("IMG_1.jpg")
        w.fs.collectGarbage()
        for block in blocks {
            #expect(try w.pins(block) == 1)
            #expect(try w.stored(block) == (true, true), "no file names it, the queued backup still does")
        }

        try BackupQueue(db: w.db).markDone(item.id, linked: false, recorded: true)
        for block in blocks { #expect(try w.pins(block) == 0, "done: the pin drops") }
        w.fs.collectGarbage()
        for block in blocks { #expect(try w.stored(block) == (false, false), "nothing names it any more: the garbage pass took it") }
    }

    @Test func aBlockTwiceInOnePhotoIsPinnedOnceAndUnpinnedOnce() throws {
        let dir = TemporaryDirectory("vdrive-pins"); defer { dir.remove() }
        let w = try Workspace(dir); defer { w.fs.shutdown() }
        let block = randomBytes(Blocks.size, seed: 2)
        try w.store("clip.mov", block + block + [1, 2, 3])
        let item = try w.item("clip.mov")
        let repeated = try #require(item.commit.blocks.first)
        #expect(item.commit.blocks == [repeated, repeated, item.commit.blocks[2]])
        #expect(try w.pins(repeated) == 1)
        try BackupQueue(db: w.db).markDone(item.id, linked: false, recorded: true)
        #expect(try w.pins(repeated) == 0)
        w.fs.collectGarbage()
        #expect(try w.stored(repeated) == (true, true), "the file still names it")
    }

    /// Every change of state in and out of `done` moves the pins: a version the server
    /// lost is queued again and pinned again, a failed one keeps its pins (it may be
    /// retried), and a queued version replaced by a newer one lets its blocks go.
    @Test func pinsFollowTheItemInAndOutOfDone() throws {
        let dir = TemporaryDirectory("vdrive-pins"); defer { dir.remove() }
        let w = try Workspace(dir); defer { w.fs.shutdown() }
        let queue = BackupQueue(db: w.db)
        try w.store("IMG_2.jpg", randomBytes(1000, seed: 3))
        let first = try w.item("IMG_2.jpg")
        let old = try #require(first.commit.blocks.first)
        try queue.markDone(first.id, linked: false, recorded: true)
        #expect(try w.pins(old) == 0)

        #expect(try queue.requeueDone(path: first.commit.path, hash: first.commit.hash, reason: "the server lost it") == 1)
        #expect(try w.pins(old) == 1, "queued again: pinned again")
        try queue.markFailed(first.id, reason: "refused")
        #expect(try w.pins(old) == 1, "failed is not done: still pinned")

        // A newer version at the same path replaces the failed one in the queue.
        try w.remove("IMG_2.jpg")
        try w.store("IMG_2.jpg", randomBytes(1000, seed: 4))
        let second = try w.item("IMG_2.jpg")
        #expect(second.id != first.id)
        #expect(try queue.item(id: first.id) == nil, "the older version left the queue")
        let new = try #require(second.commit.blocks.first)
        #expect(try w.pins(new) == 1)
        w.fs.collectGarbage()
        #expect(try w.stored(old) == (false, false), "its item gone, nothing names the old block")
    }
}
