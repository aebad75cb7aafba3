import Foundation
import DeviceWiring
import Backup
import Drive
import Storage
import WorkspaceMirror

/// `vdrive task run us.virtualdrive.backup|us.virtualdrive.sync`: one task's work
/// without a mount, for systemd timers. Safe beside a running mount: one process
/// uploads at a time (the engine's lock in the state folder).
enum TaskCommand {
    static var verb: Verb {
        Verb(name: "task", summary: "run a backup or sync task without a mount (for systemd timers)", help: """
        Usage: vdrive task run TASK [--state DIR] [--server URL] [--token-file FILE]
                                    [--ca-file FILE] [--allow-insecure-http]

        Tasks:
          us.virtualdrive.backup   upload what the queue holds, then stop
          us.virtualdrive.sync     refresh the watermark and dedup knowledge with the server,
                                   learn every device's backups (the records Backups/ shows),
                                   and bring the workspace up to date both ways (unless a
                                   mount of it runs: the mount keeps it in sync itself)

        Respects the policies ('vdrive settings'): paused, metered network, low battery.
        Prints the final status line. Exit 0 when the task ran (even if it had to wait),
        75 when another process holds the queue, 66 when there is no workspace yet
        (or the CA file is unreadable), 78 a token bound for plain HTTP to another machine.

        The server is --server with --token-file, else the one the drive in the state
        folder (--state, default $XDG_DATA_HOME/vdrive/drive) was last mounted with, else
        $XDG_CONFIG_HOME/vdrive/remote.json.

        Options:
        \(RemoteConfig.help)
        """, run: run)
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: RemoteConfig.valued.union(["--state"]), flags: RemoteConfig.flags)
        guard options.positionals.count == 2, options.positionals[0] == "run" else {
            throw CLIError.usage("usage: vdrive task run TASK; see 'vdrive task --help'")
        }
        guard let task = BackupTask(rawValue: options.positionals[1]) else {
            throw CLIError.usage("unknown task '\(options.positionals[1])'; tasks: \(BackupTask.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let state = Paths.absolute(options.value("--state") ?? BackupPaths.stateFolder)
        let catalog = state + "/catalog.sqlite"
        guard FileManager.default.fileExists(atPath: catalog) else {
            throw CLIError("no workspace in \(state) (no catalog.sqlite); mount it once first, or pass --state DIR", code: ExitCode.noInput)
        }
        // Apply the migrations exactly as a mount would, refusing a newer catalog.
        let blobs: BlobStore
        do {
            let db = try Database(path: catalog)
            try db.refuseNewerSchema(known: DriveFileSystem.catalogMigrations(extra: WiringSchema.catalogExtras))
            blobs = try BlobStore(root: state + "/blobs")
        } catch let error as MigrationError {
            throw CLIError(error.description, code: ExitCode.config)
        }
        let remote = try RemoteConfig.load(options, stateFolder: state)
        let report = try BackupEngine.runOnce(task: task, configuration: BackupWiring.configuration(catalogPath: catalog, state: state),
                                              transport: try BackupWiring.transport(remote),
                                              blobs: WorkspaceBlocks(stored: StoredBlocks(blobs: blobs, catalogPath: catalog)),
                                              policy: BackupWiring.policy())
        print(report.status.line)
        if task == .sync, let remote {
            try learnRecords(catalog: catalog, remote: remote)
            try mirror(state: state, remote: remote)
        }
        if report.busy {
            printError("another vdrive process is uploading from \(state); it goes on, nothing to do here")
            return ExitCode.tempFail
        }
        return ExitCode.ok
    }

    /// One mirror pass without a mount: the server's changes applied to the catalog, the
    /// catalog's unsent changes sent. Skipped while a mount holds the state folder.
    static func mirror(state: String, remote: RemoteConfig) throws {
        let lock: StateFolder
        do { lock = try StateFolder.open(state) } catch let error as CLIError where error.code == ExitCode.tempFail {
            print("Workspace: mounted; the mount keeps it in sync")
            return
        }
        defer { lock.release() }
        let fs = try DriveFileSystem(statePath: state, extraMigrations: WiringSchema.catalogExtras,
                                     rootFolders: [CameraRollRules.folderName])
        _ = try fs.recover()
        defer { fs.shutdown() }
        let wiring = try MirrorWiring(fs: fs, remote: remote)
        guard let engine = wiring.engine else { return }
        do {
            try engine.runOnce()
        } catch let offline as MirrorUnreachable {
            throw CLIError("could not reach the workspace server at \(remote.url): \(offline); local changes stay and go at the next run", code: ExitCode.unavailable)
        }
        // The words of `vdrive status`: what is left after the pass, conflicts it made.
        print(engine.status.line)
    }

    /// Follows the change feed into the records table, as a mount does, so the next
    /// mount's `Backups/` is current at once (and listing works offline).
    static func learnRecords(catalog: String, remote: RemoteConfig) throws {
        let db = try Database(path: catalog)
        let all = DriveFileSystem.catalogMigrations(extra: WiringSchema.catalogExtras)
        let missing = Set(all.map(\.name)).subtracting(try db.appliedMigrations())
        let recordsOnly = Set(RecordsTable.migrationNames).union(MirrorSchema.migrations.map(\.name))
        guard missing.isSubset(of: recordsOnly) else {
            throw CLIError("the workspace in \((catalog as NSString).deletingLastPathComponent) was made by an older vdrive; mount it once with this version first", code: ExitCode.config)
        }
        try db.migrate(all)
        let table = try RecordsTable(catalogPath: catalog)
        do {
            let changed = try RecordsFollower.catchUp(table, from: try ClientRemoteRecords.forRemote(remote))
            print("Backups: \(changed.count) file(s) changed on the server (feed at \(try table.cursor()))")
        } catch let failure as RemoteFailure {
            throw CLIError("could not follow the server's change feed at \(remote.url): \(failure); Backups/ keeps the last known records", code: ExitCode.unavailable)
        }
    }
}
