import Foundation
import Backup
import Drive
import Storage

/// A mounted drive with the pieces that join it on this device: the camera backup and
/// its `.backup/` tree, `Backups/`, the workspace mirror, the cache bound and pins.
/// Serves until the kernel unmounts it, then stops each piece (uploads in flight resume
/// at the next mount).
public enum DeviceMount {
    /// Holds the state folder, opens its catalog (every migration: drive, backup,
    /// wiring, mirror), mounts at `mountPoint` and serves; `ready` is called once the
    /// kernel has the mount. Failures are `CLIError`s with the exit code to use.
    public static func serve(mountPoint: String, state: String, remote: RemoteConfig?, ready: () -> Void) throws {
        let lock = try StateFolder.open(state)
        defer { lock.release() }
        let fs: DriveFileSystem
        do {
            fs = try DriveFileSystem(statePath: state, extraMigrations: WiringSchema.catalogExtras,
                                     rootFolders: [CameraRollRules.folderName])
        } catch let error as MigrationError {
            throw CLIError(error.description, code: ExitCode.config)
        } catch let error as DatabaseError where error.isCorrupt {
            throw CLIError("catalog \(state)/catalog.sqlite is not a readable SQLite database (\(error.message)); move it aside to start an empty workspace, nothing was changed", code: ExitCode.dataError)
        } catch let error as DatabaseError {
            throw CLIError("cannot open the catalog in \(state): \(error.message)", code: ExitCode.ioError)
        } catch let error as Errno {
            throw CLIError("cannot use the state folder \(state): \(error)", code: ExitCode.cantCreate)
        }
        DaemonTuning.memory()
        DaemonTuning.openFiles()
        let lost = try fs.recover()
        if !lost.isEmpty { printError("\(lost.count) file(s) lost content in an unclean stop; see the log") }
        let backup = try BackupWiring(fs: fs, state: state, remote: remote)
        let backups = try BackupsWiring(fs: fs, remote: remote)
        let pins = backup.residency.pins
        // One held request per device: the mirror's tree feed watches Backups/' feed too.
        let mirror = try MirrorWiring(fs: fs, remote: remote,
                                      arrivals: ArrivalPrefetch(cache: fs.blockCache, wakePins: { pins.wake() }),
                                      carrying: backups.follower, statusFile: WorkspaceStatusFile(stateFolder: state))
        if let engine = mirror.engine, let tree = fs.virtualTree as? BackupQueueTree {
            tree.mirrorStatus = { engine.status }
            tree.mirrorFailure = { engine.failure(of: $0) }
            tree.mirrorExcludes = { engine.isExcluded($0) }
            tree.mirrorLocalOnly = {
                do { return try engine.localOnlyNames() } catch {
                    printError("could not list what stays on this device (.backup/not-synced): \(error)")
                    return ["(the list could not be read from the catalog: \(error))"]
                }
            }
            tree.hasWriters = { [unowned fs] in fs.hasWriters($0) }
        }
        if let remote {
            do { try remote.remember(in: state) } catch {
                printError("could not note the server in \(RemoteConfig.rememberedPath(in: state)) (\(error)); 'vdrive versions' and 'trash' then need --server and --token-file")
            }
        }
        let session = FuseSession(fs: fs, mountPoint: mountPoint, source: state)
        do { try session.mount() } catch let error as MountError { throw cliError(error) }
        let pidFile = MountRegistry.pidFile(for: mountPoint)
        MountRegistry.record(pidFile)
        defer { MountRegistry.remove(pidFile) }
        fs.startBackgroundWork()
        backup.start()
        backups.start(carried: mirror.engine != nil)
        mirror.start()
        ready()
        _ = session.run()
        // Unmounted: stop uploads quickly (they resume at the next mount), then the drive.
        mirror.stop()
        backups.stop()
        backup.stop()
        fs.shutdown()
    }

    /// A mount point or FUSE failure as the command reports it.
    public static func cliError(_ error: MountError) -> CLIError {
        switch error {
        case .mountPointMissing, .mountPointNotDirectory: return CLIError(error.description, code: ExitCode.noInput)
        case .alreadyMounted: return CLIError(error.description, code: ExitCode.unavailable)
        case .fuseUnavailable, .fuseDeviceClosed: return CLIError(error.description, code: ExitCode.unavailable)
        case .mountFailed: return CLIError(error.description, code: ExitCode.osError)
        }
    }
}
