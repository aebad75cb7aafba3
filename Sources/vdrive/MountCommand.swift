import Foundation
import DeviceWiring
import Drive

/// `vdrive mount` and `vdrive unmount`.
enum MountCommand {
    static let verb = Verb(
        name: "mount",
        summary: "mount the workspace at a folder (backs up its Camera Roll)",
        help: """
        Usage: vdrive mount MOUNTPOINT [--state DIR] [--camera-backup] [--server URL]
                            [--token-file FILE] [--ca-file FILE] [--allow-insecure-http] [-f]

        Mounts the workspace at MOUNTPOINT, an existing empty folder. Returns once the
        mount is ready and keeps serving it in the background. Photos committed under
        'Camera Roll/' are queued for backup; with camera backup on, they are uploaded
        in the background to the workspace server. See what is backed up with
        'ls MOUNTPOINT/.backup/pending' and 'cat MOUNTPOINT/.backup/status'.

        Options:
          --state DIR        where the workspace lives (catalog and blobs), and the
                             background mount's log (DIR/vdrive.log); default
                             $XDG_DATA_HOME/vdrive/drive, log $XDG_DATA_HOME/vdrive/vdrive.log
          --camera-backup    turn camera backup on (the same as
                             'vdrive settings camera-backup on'; it stays on)
          --server URL       the workspace server (default: from
                             $XDG_CONFIG_HOME/vdrive/remote.json)
          --token-file FILE  this device's token (default: from remote.json)
        \(RemoteConfig.help)
          -f                 stay in the foreground (for systemd and debugging)
          --help             show this help

        Stop with 'vdrive unmount MOUNTPOINT' (or fusermount3 -u MOUNTPOINT).
        """,
        run: mount)

    static let unmountVerb = Verb(
        name: "unmount",
        summary: "unmount a mounted workspace and wait for it to stop",
        help: """
        Usage: vdrive unmount MOUNTPOINT

        Unmounts the workspace and waits (up to 60 s) for its process to finish
        writing. Uploads in flight continue at the next mount or task run.
        """,
        run: unmount)

    static func mount(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: RemoteConfig.valued.union(["--state", "--ready-pipe"]),
                                  flags: RemoteConfig.flags.union(["-f", "--foreground", "--camera-backup"]))
        guard options.positionals.count == 1 else {
            throw CLIError.usage("mount takes one MOUNTPOINT; see 'vdrive mount --help'")
        }
        let mountPoint = (Paths.absolute(options.positionals[0]) as NSString).standardizingPath
        let state = Paths.absolute(options.value("--state") ?? Paths.dataHome + "/drive")
        let foreground = options.has("-f") || options.has("--foreground")
        do {
            try FuseSession.checkMountPoint(mountPoint)
        } catch let error as MountError {
            throw DeviceMount.cliError(error)
        }
        let remote = try RemoteConfig.load(options)
        if options.has("--camera-backup") { try BackupWiring.turnCameraBackupOn() }
        if !foreground && options.value("--ready-pipe") == nil {
            var childArguments = ["mount", mountPoint, "--state", state, "-f", "--ready-pipe", "stdout"]
            if let remote { childArguments += remote.arguments }
            // A drive of its own state folder logs there: several mounts of one user each
            // have their log, not one file of all their lines.
            let logs = (options.value("--state") == nil ? [] : [state + "/vdrive.log"]) + [Paths.dataHome + "/vdrive.log"]
            return try Daemon.start(arguments: childArguments, mountPoint: mountPoint, logPaths: logs)
        }
        let notifier = ReadyNotifier(enabled: options.value("--ready-pipe") != nil)
        do {
            try DeviceMount.serve(mountPoint: mountPoint, state: state, remote: remote, ready: notifier.ready)
            return ExitCode.ok
        } catch let error as CLIError {
            notifier.failed(error)
            throw error
        }
    }

    static func unmount(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: [], flags: [])
        guard options.positionals.count == 1 else { throw CLIError.usage("unmount takes one MOUNTPOINT") }
        let mountPoint = (Paths.absolute(options.positionals[0]) as NSString).standardizingPath
        guard FuseSession.isMounted(mountPoint) else {
            throw CLIError("\(mountPoint) is not mounted", code: ExitCode.usage)
        }
        let pid = MountRegistry.pid(for: mountPoint)
        let status = Subprocess.run("/bin/fusermount3", ["-u", mountPoint]) ?? Subprocess.run("/bin/umount", [mountPoint]) ?? 1
        if status != 0 && FuseSession.isMounted(mountPoint) {
            throw CLIError("could not unmount \(mountPoint) (is a program still using it? see 'fuser -m \(mountPoint)')", code: ExitCode.tempFail)
        }
        if let pid { MountRegistry.waitForExit(pid, seconds: 60) }
        return ExitCode.ok
    }
}
