import Testing
import Foundation
import Crypto
import Storage
import Backup
import CLinux
import DeviceWiring
@testable import Drive

/// Tier three: a state folder as the whole-blob version (drive-001, backup-1, wiring-1)
/// left it, with photos queued and one already backed up, mounted by this version with
/// a real server: the catalog moves to blocks, the queue to content hashes and block
/// pins, and the queued photos are backed up with the right bytes.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct MigrationEndToEndTests {
    @Test func aWholeBlobStateFolderMovesForwardAndItsQueueIsBackedUp() throws {
        let dir = TemporaryDirectory("vdrive-migrate"); defer { dir.remove() }
        let state = dir.path + "/state"
        let photo = try BackupEndToEndTests.photo(3)
        let video = pseudoRandomBytes(9 << 20, seed: 61)          // split into three blocks
        let gone = try BackupEndToEndTests.photo(4)               // backed up, then deleted
        let wiring1 = try #require(WiringSchema.migrations.first { $0.name == "wiring-1-backup-pins-blobs" })
        let store = try BlobStore(root: state + "/blobs")
        let photoBlob = try storeWholeBlob(photo, in: store), videoBlob = try storeWholeBlob(video, in: store)
        do {
            let db = try Database(path: state + "/catalog.sqlite")
            try db.migrate([CatalogSchema.migrations[0], BackupSchema.migrations[0], wiring1])
            let dirMode = UInt32(S_IFDIR) | 0o755, fileMode = UInt32(S_IFREG) | 0o644
            try db.run("INSERT INTO inodes(ino, mode, uid, gid, nlink, atime_ns, mtime_ns, ctime_ns) VALUES (1, ?, 0, 0, 3, 0, 0, 0), (2, ?, 0, 0, 2, 0, 0, 0)", dirMode, dirMode)
            try db.run("INSERT INTO entries(parent, name, ino) VALUES (1, ?, 2)", Array("Camera Roll".utf8))
            try db.run("INSERT INTO blobs(hash, size, refs, gen) VALUES (?, ?, 0, 1), (?, ?, 0, 1)", photoBlob.hex, photo.count, videoBlob.hex, video.count)
            for (ino, name, blob, size) in [(3, "IMG_3.jpg", photoBlob, photo.count), (4, "clip.mov", videoBlob, video.count)] {
                try db.run("INSERT INTO inodes(ino, mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns, blob) VALUES (?, ?, 0, 0, ?, 1, 0, 0, 0, ?)", ino, fileMode, size, blob.hex)
                try db.run("INSERT INTO entries(parent, name, ino) VALUES (2, ?, ?)", Array(name.utf8), ino)
                try db.run("INSERT INTO camera_changes(ino, path, hash, size, mtime_ns, committed_ns) VALUES (?, ?, ?, ?, 0, 0)", ino, "Camera Roll/" + name, blob.hex, size)
                try db.run("INSERT INTO backup_items(change_sequence, inode, path, hash, size, mtime, queued_at) VALUES (?, ?, ?, ?, ?, 0, 0)",
                           ino, ino, "Camera Roll/" + name, blob.hex, size)
            }
            try db.run("INSERT INTO backup_items(change_sequence, inode, path, hash, size, mtime, state, queued_at) VALUES (9, 9, 'Camera Roll/old.jpg', ?, ?, 0, 'done', 0)",
                       SHA256Hasher.digest(gone).hex, gone.count)
            try db.run("INSERT INTO drive_meta(key, value) VALUES ('created_ns', 0)")
            #expect(try db.queryOne("SELECT refs FROM blobs WHERE hash = ?", videoBlob.hex) { $0.int64(0) } == 2, "old pins in place")
        }

        let server = try LocalServer(folder: dir.path); defer { server.stop() }
        let drive = try MountedDrive(state: state, label: "vdrive-migrate", arguments: server.mountArguments + ["--camera-backup"])
        defer { drive.stop() }
        try BackupEndToEndTests.waitForBackup(drive, done: 3, seconds: 180)
        #expect(try readFile(drive.path("Camera Roll/IMG_3.jpg")) == photo)
        #expect(try readFile(drive.path("Camera Roll/clip.mov")) == video)
        #expect(server.contentHashes() == [ContentHash.of(bytes: photo).hex, ContentHash.of(bytes: video).hex])
        #expect(BackupEndToEndTests.xattr(drive.path("Camera Roll/clip.mov"), "user.vdrive.backup") == "done")
        #expect(BackupEndToEndTests.xattr(drive.path("Camera Roll/clip.mov"), "user.vdrive.content-hash") == ContentHash.of(bytes: video).hex)
        let old = try String(contentsOfFile: drive.path(".backup/done/old.jpg"), encoding: .utf8)
        #expect(old.contains(ContentHash.of(bytes: gone).hex), "a done item moves to its content hash too: \(old)")
        // The split video's old whole-file blob is gone; its blocks (and nothing else) stay.
        #expect(!FileManager.default.fileExists(atPath: store.path(for: videoBlob)))
    }
}
