import Foundation
import Backup
import Drive
import WorkspaceMirror

/// Connects the workspace mirror to a mounted drive: the change journal always (so that
/// changes made while no server is configured are sent once one is), and the engine when
/// a server is configured.
public final class MirrorWiring {
    public let engine: MirrorEngine?

    /// The mirror alone (a pass without a mount).
    public convenience init(fs: DriveFileSystem, remote: RemoteConfig?) throws {
        try self.init(fs: fs, remote: remote, arrivals: nil, carrying: nil)
    }

    /// `arrivals`: told of contents the mirror brings down (a mount prefetches small files).
    /// `carrying`: a feed the mirror's held tree request watches too (`Backups/`' records).
    /// `statusFile`: where the mirror's status is kept for `vdrive status` while it runs.
    init(fs: DriveFileSystem, remote: RemoteConfig?, arrivals: MirrorArrivals?, carrying: CarriedFeed?,
         statusFile: WorkspaceStatusFile? = nil) throws {
        self.statusFile = statusFile
        guard let remote else {
            fs.addFollower(MirrorJournal())
            engine = nil
            return
        }
        let server = try ClientMirrorServer(remote: remote, carrying: carrying)
        var publish: (@Sendable (MirrorStatus) -> Void)?
        if let statusFile { publish = { statusFile.write($0) } }
        // Content goes up on the backup's terms (paused, metered, battery).
        let transfers = TransferHold(settings: SettingsFile(path: BackupPaths.settings), policy: BackupWiring.policy())
        engine = try MirrorEngine(drive: fs, server: server, device: {
            (try? server.deviceName()) ?? ProcessInfo.processInfo.hostName
        }, settings: Self.settings(), arrivals: arrivals, statusChanged: publish, hold: { transfers.reason() })
    }

    private let statusFile: WorkspaceStatusFile?

    /// The user's `sync-exclude` patterns beside the built-in ones (read at the mount's
    /// start: a change takes effect at the next mount); `VDRIVE_MIRROR_HOLD` (seconds a
    /// feed request may be held) for tests and benchmarks.
    static func settings() -> MirrorSettings {
        var s = MirrorSettings()
        do {
            s.userExcluded = try WorkspaceSettings.load(BackupPaths.settings).syncExclude
        } catch {
            printError("the workspace's sync-exclude patterns are not used: \(error); fix them with 'vdrive settings sync-exclude'")
        }
        if let text = ProcessInfo.processInfo.environment["VDRIVE_MIRROR_HOLD"], let hold = Int(text), (0...60).contains(hold) { s.hold = hold }
        return s
    }

    func start() { engine?.start() }
    func stop() {
        engine?.stop()
        statusFile?.remove()
    }
}
