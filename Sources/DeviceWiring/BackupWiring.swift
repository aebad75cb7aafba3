import Foundation
import Backup
import Crypto
import Drive
import Storage

/// Connects the backup engine to a mounted drive: the change journal's follower, the
/// `.backup/` tree, and the transport to the configured server (or none, in which case the
/// engine waits and its status says so).
public final class BackupWiring {
    let hook = BackupHook()
    let engine: BackupEngine
    private let fs: DriveFileSystem
    /// Blocks not held here, fetched from the server; the cache bound.
    let residency: ResidencyWiring

    init(fs: DriveFileSystem, state: String, remote: RemoteConfig?) throws {
        self.fs = fs
        residency = ResidencyWiring(fs: fs, stateFolder: state, settingsPath: BackupPaths.settings, remote: remote, backup: hook)
        // Before the mount serves, no handle can be open: versions a killed mount left
        // unsettled are what their files hold now, so they may go.
        try BackupQueue.settleAll(in: try Database(path: fs.catalogPath))
        engine = BackupEngine(configuration: Self.configuration(catalogPath: fs.catalogPath, state: state),
                              transport: try Self.transport(remote),
                              blobs: WorkspaceBlocks(stored: StoredBlocks(blobs: fs.blobStore, catalogPath: fs.catalogPath)),
                              policy: Self.policy())
        fs.addFollower(hook)
        let engine = self.engine
        fs.virtualTree = try BackupQueueTree(catalogPath: fs.catalogPath, status: { engine.status() })
    }

    public static func configuration(catalogPath: String, state: String) -> BackupEngine.Configuration {
        BackupEngine.Configuration(databasePath: catalogPath, stateFolder: state, settingsPath: BackupPaths.settings)
    }

    /// The policy inputs. `VDRIVE_SYSTEM_ROOT` points the battery and network probes at
    /// another root than "/" (its `sys/` and `proc/`): tests build fake trees there.
    public static func policy(probeInterval: Double = 15) -> BackupPolicy {
        let root = ProcessInfo.processInfo.environment["VDRIVE_SYSTEM_ROOT"] ?? "/"
        return BackupPolicy(power: PowerProbe(root: root), network: SystemNetworkProbe(root: root), probeInterval: probeInterval)
    }

    public static func transport(_ remote: RemoteConfig?) throws -> BackupTransport {
        guard let remote else { return UnconfiguredTransport() }
        return ClientTransport(client: try remote.client())
    }

    func start() {
        residency.start()
        do {
            try engine.start()
            hook.attach(engine)
        } catch {
            printError("camera backup cannot start: \(error); the drive works, backup waits until the next mount")
        }
    }

    func stop() {
        hook.attach(nil)
        residency.stop()
        _ = engine.stop()
        fs.collectGarbage()
    }

    public static func turnCameraBackupOn() throws {
        let file = SettingsFile(path: BackupPaths.settings)
        var settings = try file.load()
        guard !settings.cameraBackup else { return }
        settings.cameraBackup = true
        try file.save(settings)
    }
}

/// The transport when no server is configured: every call fails as transient with
/// what to do, so items stay queued and the status names the reason.
struct UnconfiguredTransport: BackupTransport {
    static let reason = "no workspace server is configured: run ./mount, or pass --server URL --token-file FILE"

    private func fail<T>() throws -> T { throw BackupTransportError(.transient, Self.reason) }
    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> { try fail() }
    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan { try fail() }
    func uploadOffset(url: String) throws -> Int64 { try fail() }
    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest, progress: (Int64) -> Bool) throws -> Int64 { try fail() }
    func recordFile(_ record: BackupRecord) throws { throw BackupTransportError(.transient, Self.reason) }
    func watermark() throws -> BackupWatermark? { try fail() }
    func setWatermark(_ watermark: BackupWatermark) throws { throw BackupTransportError(.transient, Self.reason) }
}
