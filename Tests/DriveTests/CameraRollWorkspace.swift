import Foundation
import Backup
import Storage
@testable import Drive

extension DriveFileSystem {
    /// A drive as a mount makes it, for tests without a kernel: the Camera Roll at the root
    /// of a new workspace, and its photos kept as block files, which the backup's follower
    /// of the drive's changes asks for in a mount (`BackupHook`, a piece of the daemon).
    static func workspace(statePath: String, flushInterval: TimeInterval = 1.0) throws -> DriveFileSystem {
        let fs = try DriveFileSystem(statePath: statePath, rootFolders: [CameraRollRules.folderName], flushInterval: flushInterval)
        fs.addFollower(PhotosAsBlockFiles())
        return fs
    }
}

/// Keeps the camera roll's photos as block files, by the camera roll's one rule; records nothing.
final class PhotosAsBlockFiles: ChangeJournal {
    func record(_ change: DriveChange, in database: Database) throws {}
    func committed() {}
    func keepsBlockFiles(ino: UInt64, path: () throws -> String?) throws -> Bool {
        try path().map(CameraRollRules.isInCameraRoll) ?? false
    }
}

/// Hears the drive's changes as the backup's follower does and keeps what that one queues:
/// a media file under the Camera Roll (the one rule) committed or renamed into place, with
/// its version and a sequence number, asked to commit at once.
/// `failing`: every such change throws it instead (the change must roll back).
final class PhotoRecorder: ChangeJournal, @unchecked Sendable {   // used on the test's thread only
    struct Heard: Equatable {
        var ino: UInt64
        var path: String
        var version: ContentVersion
        var sequence: Int64
    }
    private(set) var heard: [Heard] = []
    private(set) var settledInodes: [UInt64] = []
    private(set) var committedCount = 0
    var failing: Error?
    /// Told `committed` after a change it failed (which never committed).
    private(set) var toldAfterFailing = false
    private var failed = false

    func record(_ change: DriveChange, in database: Database) throws {
        guard change.kind == .content || change.kind == .renamed,
              let path = try change.path(), CameraRollRules.isInCameraRoll(path), let version = try change.version() else { return }
        if let failing { failed = true; throw failing }
        heard.append(Heard(ino: change.ino, path: path, version: version, sequence: try change.sequence()))
        change.commitAtOnce()
    }

    func committed() {
        committedCount += 1
        if failed { toldAfterFailing = true }
    }

    /// True for a file it took a version of (as the queue's settle finds that version).
    func settled(ino: UInt64, in database: Database) throws -> Bool {
        settledInodes.append(ino)
        return heard.contains { $0.ino == ino }
    }

    func keepsBlockFiles(ino: UInt64, path: () throws -> String?) throws -> Bool {
        try path().map(CameraRollRules.isInCameraRoll) ?? false
    }
}
