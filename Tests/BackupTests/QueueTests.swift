import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

@Suite(.tags(.logic)) struct QueueTests {
    @Test func enqueueInsideCommittedTransactionQueuesPending() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 1), path: "Camera Roll/a.jpg")
        let item = try h.item(c)
        #expect(item.state == .pending)
        #expect(item.hash == c.hash)
        #expect(item.size == 1000)
        #expect(item.path == "Camera Roll/a.jpg")
        #expect(item.blocks == c.blocks)
        #expect(item.commit.settled)
        #expect(try h.queue.counts() == BackupQueue.Counts(pending: 1, bytesLeft: 1000))
        // The block list is stored as JSON text, so the drive's triggers can read it with json_each.
        let pinned = try h.db.query("SELECT value FROM backup_items, json_each(backup_items.blocks) WHERE backup_items.id = ?", item.id) {
            $0.string(0) ?? ""
        }
        #expect(pinned == c.blocks.map(\.hex))
    }

    @Test func enqueueInRolledBackTransactionLeavesNothing() throws {
        let h = try Harness(); defer { h.remove() }
        struct DiskFull: Error {}
        let manifest = InMemoryTransport.manifest(of: Array("x".utf8))
        let commit = CameraRollCommit(changeSequence: 7, inode: 70, path: "Camera Roll/b.jpg",
                                      hash: manifest.content, size: 1, mtime: 0, blocks: manifest.blocks, settled: true)
        #expect(throws: DiskFull.self) {
            try h.db.transaction {
                try h.db.run("INSERT INTO files(inode, path) VALUES (70, 'Camera Roll/b.jpg')")
                try BackupQueue.enqueue(in: h.db, item: commit)
                throw DiskFull()  // the drive's commit fails after queueing
            }
        }
        #expect(try h.queue.allItems().isEmpty)
        #expect(try h.db.queryOne("SELECT COUNT(*) FROM files") { $0.int(0) } == 0)
    }

    @Test func replayedChangeSequenceIsIgnored() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(10, seed: 2), path: "Camera Roll/c.jpg")
        try BackupQueue.enqueue(in: h.db, item: c)
        #expect(try h.queue.allItems().count == 1)
    }

    @Test func overwriteBeforeBackupQueuesOnlyTheNewVersion() throws {
        let h = try Harness(); defer { h.remove() }
        let old = try h.commit(testBytes(100, seed: 50), path: "Camera Roll/edit.jpg")
        let new = try h.commit(testBytes(120, seed: 51), path: "Camera Roll/edit.jpg")
        let items = try h.queue.allItems()
        #expect(items.map(\.changeSequence) == [new.changeSequence])
        _ = old
    }

    @Test func overwriteAfterBackupKeepsTheOldVersionDone() throws {
        let h = try Harness(); defer { h.remove() }
        let old = try h.commit(testBytes(100, seed: 52), path: "Camera Roll/edit.jpg")
        _ = try h.makeWorker().drain()
        let new = try h.commit(testBytes(120, seed: 53), path: "Camera Roll/edit.jpg")
        #expect(try h.state(old) == .done)
        #expect(try h.state(new) == .pending)
        _ = try h.makeWorker().drain()
        #expect(h.server.content(old.hash) != nil && h.server.content(new.hash) != nil)
    }

    @Test func stateMachineTransitions() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(10, seed: 3), path: "Camera Roll/d.jpg")
        let id = try h.item(c).id
        try h.queue.markUploading(id)
        #expect(try h.state(c) == .uploading)
        try h.queue.scheduleRetry(id, at: 500, error: "connection refused")
        var item = try h.item(c)
        #expect(item.state == .pending)
        #expect(item.attempts == 1)
        #expect(item.nextAttemptAt == 500)
        #expect(try h.queue.nextDue(now: 499) == nil)
        #expect(try h.queue.nextDue(now: 500)?.id == id)
        #expect(try h.queue.earliestDue() == 500)

        try h.queue.markUploading(id)
        try h.queue.markFailed(id, reason: "the local copy is missing")
        item = try h.item(c)
        #expect(item.state == .failed)
        #expect(item.failureReason == "the local copy is missing")
        #expect(try h.queue.nextDue(now: .infinity) == nil)

        #expect(try h.queue.retryFailed() == 1)
        item = try h.item(c)
        #expect(item.state == .pending)
        #expect(item.attempts == 0)
        #expect(item.failureReason == nil)

        try h.queue.markUploading(id)
        try h.queue.markDone(id, linked: false, recorded: true)
        item = try h.item(c)
        #expect(item.state == .done)
        #expect(item.bytesSent == 10)
        #expect(try h.queue.counts() == BackupQueue.Counts(done: 1))
    }

    @Test func interruptedUploadsGoBackToPending() throws {
        let h = try Harness(); defer { h.remove() }
        let a = try h.commit(testBytes(10, seed: 4), path: "Camera Roll/a.jpg")
        try h.queue.markUploading(try h.item(a).id)
        #expect(try h.queue.recoverInterrupted() == 1)
        #expect(try h.state(a) == .pending)
    }

    @Test func migrationsAreNamedAndIdempotent() throws {
        let h = try Harness(); defer { h.remove() }
        try BackupSchema.apply(to: h.db)
        let names = try h.db.appliedMigrations()
        #expect(names.contains("backup-1-items"))
        #expect(names.contains("backup-2-blocks-settled"))
        #expect(BackupSchema.migrations.allSatisfy { $0.name.hasPrefix("backup-") })
    }

    /// A catalog made before blocks: its rows gain an empty block list and count as
    /// settled (the drive's own migration rewrites hash and blocks of the undone ones).
    @Test func rowsQueuedBeforeBlocksMigrateAsSettledWithNoBlocks() throws {
        let root = FileManager.default.temporaryDirectory.path + "/vdrive-backup-mig-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let db = try Database(path: root + "/catalog.db")
        try db.migrate([BackupSchema.migrations[0]])
        let oldHash = SHA256Hasher.digest("a whole-file SHA-256, as before blocks")
        try db.run("""
            INSERT INTO backup_items (change_sequence, inode, path, hash, size, mtime, queued_at)
            VALUES (5, 50, 'Camera Roll/old.jpg', ?, 123, 0, 0)
            """, oldHash.hex)
        try BackupSchema.apply(to: db)
        let queue = BackupQueue(db: db)
        let item = try #require(try queue.allItems().first)
        #expect(item.hash == oldHash)
        #expect(item.blocks.isEmpty)
        #expect(item.commit.settled)
        #expect(try queue.nextDue(now: 1)?.id == item.id)
        try BackupSchema.apply(to: db)  // a second run changes nothing
        #expect(try db.appliedMigrations() == BackupSchema.migrations.map(\.name))
    }

    @Test func listingNamesAreFlatReadableAndUnique() throws {
        let h = try Harness(); defer { h.remove() }
        try h.commit(testBytes(10, seed: 5), path: "Camera Roll/2024/IMG_1.jpg")
        _ = try h.makeWorker().drain()
        try h.commit(testBytes(11, seed: 6), path: "Camera Roll/2024/IMG_1.jpg")  // edited after its backup
        try h.commit(testBytes(12, seed: 7), path: "Camera Roll/IMG_2.jpg")
        _ = try h.makeWorker().drain()
        try h.commit(testBytes(13, seed: 8), path: "Camera Roll/IMG_3")
        let done = try h.queue.listing(.done).map(\.name)
        #expect(done == ["2024\u{2215}IMG_1 #1.jpg", "2024\u{2215}IMG_1 #2.jpg", "IMG_2.jpg"])
        #expect(try h.queue.listing(.pending).map(\.name) == ["IMG_3"])
        #expect(try h.queue.listing(.failed).isEmpty)
    }

    @Test func fileStateFollowsContentAndPrefersDone() throws {
        let h = try Harness(); defer { h.remove() }
        let bytes = testBytes(10, seed: 8)
        let a = try h.commit(bytes, path: "Camera Roll/a.jpg")
        #expect(try h.queue.fileState(hash: a.hash)?.state == .pending)
        try h.queue.markDone(try h.item(a).id, linked: false, recorded: true)
        try h.commit(bytes, path: "Camera Roll/copy of a.jpg")
        let state = try #require(try h.queue.fileState(hash: a.hash))
        #expect(state.state == .done)
        #expect(state.hash == a.hash)
        #expect(try h.queue.fileState(hash: SHA256Hasher.digest("never queued")) == nil)
    }
}

@Suite(.tags(.logic)) struct CameraRollRulesTests {
    @Test(arguments: [
        ".IMG_1.jpg.Ab12Cd", ".hidden.jpg", "IMG_1.jpg.part", "IMG_1.JPG.PART", "photo.crdownload", "photo.jpg~",
        "photo.tmp", "~$doc.docx", ".~lock.doc#", "x.partial", ".goutputstream-ABC123", "a.swp", "",
    ])
    func temporaryNames(_ name: String) {
        #expect(CameraRollRules.isTemporaryName(name))
    }

    @Test(arguments: ["IMG_1.jpg", "IMG_0100.heic", "holiday 2001.jpeg", "partner.jpg", "tmp.jpg", "a~b.png"])
    func finalNames(_ name: String) {
        #expect(!CameraRollRules.isTemporaryName(name))
    }

    @Test func cameraRollPaths() {
        #expect(CameraRollRules.isInCameraRoll("Camera Roll/IMG_1.jpg"))
        #expect(CameraRollRules.isInCameraRoll("Camera Roll/2024/07/IMG_1.jpg"))
        #expect(!CameraRollRules.isInCameraRoll("Camera Roll"))
        #expect(!CameraRollRules.isInCameraRoll("Documents/IMG_1.jpg"))
        #expect(!CameraRollRules.isInCameraRoll("Camera Rollers/IMG_1.jpg"))
        #expect(!CameraRollRules.isInCameraRoll("Camera Roll/.IMG_1.jpg.x8Yz1Q"))
        #expect(!CameraRollRules.isInCameraRoll("Camera Roll/.staging/IMG_1.jpg"))
        #expect(!CameraRollRules.isInCameraRoll("Camera Roll/IMG_1.jpg.part"))
    }

    @Test func flattenedNames() {
        #expect(CameraRollRules.flattenedName("Camera Roll/IMG_1.jpg") == "IMG_1.jpg")
        #expect(CameraRollRules.flattenedName("Camera Roll/2024/IMG_1.jpg") == "2024\u{2215}IMG_1.jpg")
    }
}
