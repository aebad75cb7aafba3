import Testing
import Foundation
import Storage
import Backup

/// Tier three: both followers of the drive's changes on one mount (the camera backup and
/// the workspace mirror), a real `vdrive serve` behind them. Each hears every commit and
/// takes what is its own by the camera roll's one rule (`CameraRollRules`): a photo in the
/// Camera Roll is backed up and never sent to the workspace; a file elsewhere, photo or
/// not, is sent to the workspace and never backed up; a file in the Camera Roll that is no
/// photo is neither. A photo moved into the Camera Roll leaves the workspace and is backed
/// up, from the one rename both hear.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct ChangeFollowersEndToEndTests {
    /// The names of the server's live workspace nodes.
    static func workspaceNames(_ server: LocalServer) -> Set<String> {
        Set(server.records("SELECT name FROM tree_nodes WHERE deleted_at IS NULL"))
    }

    /// Marks the mirror has not looked at yet, in the mount's catalog.
    static func mirrorMarks(_ drive: MountedDrive) throws -> Int {
        let db = try Database(path: drive.state + "/catalog.sqlite", options: .init(readOnly: true, create: false))
        return try db.queryOne("SELECT count(*) FROM mirror_dirty") { Int($0.int64(0)) } ?? 0
    }

    @Test(arguments: Backend.allCases)
    func aPhotoIsBackedUpAndAFileElsewhereSyncedFromOneJournal(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-followers"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, backend: backend); defer { server.stop() }
        let drive = try MountedDrive(label: "vdrive-followers", arguments: server.mountArguments + ["--camera-backup"],
                                     environment: ["VDRIVE_MIRROR_HOLD": "20"])
        defer { drive.stop() }

        try FileManager.default.createDirectory(atPath: drive.path("Docs"), withIntermediateDirectories: false)
        try writeFile(drive.path("Camera Roll/IMG_0001.jpg"), try BackupEndToEndTests.photo(0))
        try writeFile(drive.path("Camera Roll/notes.txt"), Array("no photo".utf8))
        try writeFile(drive.path("Docs/note.txt"), Array("draft".utf8))
        try writeFile(drive.path("Docs/IMG_0002.jpg"), try BackupEndToEndTests.photo(1))

        try BackupEndToEndTests.waitForBackup(drive, done: 1)
        try eventually("the workspace files on the server, and every change looked at by the mirror", within: 60, poll: 0.05) {
            let marks = try Self.mirrorMarks(drive)
            return Self.workspaceNames(server).isSuperset(of: ["Docs", "note.txt", "IMG_0002.jpg"]) && marks == 0
        }
        // The backup's: the photo in the Camera Roll, nothing else.
        #expect(BackupEndToEndTests.list(drive.path(".backup/done")) == ["IMG_0001.jpg"])
        #expect(server.hasRecord("Camera Roll/IMG_0001.jpg"))
        for path in ["Camera Roll/notes.txt", "Docs/note.txt", "Docs/IMG_0002.jpg"] {
            #expect(!server.hasRecord(path), "\(path) is not the backup's")
        }
        // The workspace's: everything outside the Camera Roll.
        let names = Self.workspaceNames(server)
        for name in ["Camera Roll", "IMG_0001.jpg", "notes.txt"] {
            #expect(!names.contains(name), "\(name) is not the workspace's")
        }

        // One rename, heard by both: the photo leaves the workspace and is backed up.
        #expect(rename(drive.path("Docs/IMG_0002.jpg"), drive.path("Camera Roll/IMG_0002.jpg")) == 0)
        try BackupEndToEndTests.waitForBackup(drive, done: 2)
        try eventually("the moved photo gone from the workspace", within: 60, poll: 0.05) {
            !Self.workspaceNames(server).contains("IMG_0002.jpg")
        }
        #expect(server.hasRecord("Camera Roll/IMG_0002.jpg"))
        #expect(Self.workspaceNames(server).isSuperset(of: ["Docs", "note.txt"]))
    }
}
