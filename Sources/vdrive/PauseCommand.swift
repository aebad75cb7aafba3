import Backup
import DeviceWiring

/// `vdrive pause` and `vdrive resume`: set the `paused` setting. A running engine sees the
/// settings file change (inotify) and stops sending within one progress tick; the
/// workspace's mirror and the fetching ahead ask at their next pass or block.
enum PauseCommand {
    static var pause: Verb { Verb(
        name: "pause", summary: "pause uploads: camera-roll backup and the workspace's content",
        help: """
        Usage: vdrive pause [--config FILE]

        Stops sending backup bytes (within one chunk on a running mount) until 'vdrive resume'.
        Files keep being queued; nothing is lost. The synced workspace sends no content
        either (changes that need no bytes still go: renames, deletes, folders, content
        the server has), and files are not fetched ahead; reading a file always fetches it.
        """,
        run: { try setPaused(true, $0) }) }

    static var resume: Verb { Verb(
        name: "resume", summary: "resume uploads",
        help: """
        Usage: vdrive resume [--config FILE]

        Lifts a 'vdrive pause' (the workspace's held content goes within about 10 s).
        Other holds (metered network, low battery) still apply.
        """,
        run: { try setPaused(false, $0) }) }

    static func setPaused(_ paused: Bool, _ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--config"], flags: [])
        guard options.positionals.isEmpty else { throw CLIError.usage("unexpected argument '\(options.positionals[0])'") }
        let file = SettingsFile(path: BackupPaths.from(options).settings)
        let settings: BackupSettings
        do {
            settings = try file.update { $0.paused = paused }
        } catch {
            throw CLIError("\(error)", code: ExitCode.config)
        }
        print(paused ? "Paused: camera backup and the workspace's uploads wait until 'vdrive resume'." : "Resumed: camera backup and the workspace's uploads.")
        if !settings.cameraBackup { print("Note: camera backup is off; turn it on with 'vdrive settings camera-backup on'.") }
        return ExitCode.ok
    }
}
