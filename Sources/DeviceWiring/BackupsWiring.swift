import Foundation
import Drive

/// Connects `Backups/` to a mounted drive: the records table in the catalog, the tree
/// generated from it, reads through the remote, and the thread following the server's
/// change feed. Without a configured server the tree shows the records learned before
/// (none on a new drive), and reads of files not held here fail with EIO.
final class BackupsWiring {
    /// The records follower (nil without a server): the workspace mirror's held request
    /// watches its feed for it (`CarriedFeed`).
    let follower: RecordsFollower?

    init(fs: DriveFileSystem, remote: RemoteConfig?) throws {
        let table = try RecordsTable(catalogPath: fs.catalogPath)
        var name = BackupsTree.preferredRootName
        if fs.rootHasEntry(named: name) {
            name = BackupsTree.alternativeRootName
            printError("the workspace has a folder of its own called '\(BackupsTree.preferredRootName)': every device's backups are in '\(name)' instead (rename that folder to get '\(BackupsTree.preferredRootName)/' back)")
        }
        fs.virtualTrees.append(try BackupsTree(table: table, rootName: name))
        guard let remote else { follower = nil; return }
        let records = try ClientRemoteRecords.forRemote(remote)
        fs.remoteReads = RemoteReads(table: table, remote: records)
        follower = RecordsFollower(table: table, remote: records, interval: Self.interval)
    }

    /// Seconds between two questions to the feed (`VDRIVE_FEED_INTERVAL` overrides, for benchmarks).
    static var interval: Double {
        ProcessInfo.processInfo.environment["VDRIVE_FEED_INTERVAL"].flatMap(Double.init) ?? 1.0
    }

    /// `carried`: the mirror's held tree request watches the feed for the follower (it
    /// holds no request of its own); false without a mirror.
    func start(carried: Bool) { follower?.start(watch: carried ? .told : .ownRequest) }
    func stop() { follower?.stop() }
}
