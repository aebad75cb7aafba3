import Backup
import DeviceWiring

/// `vdrive pause` and `vdrive resume`: set the `paused` setting. A running engine sees the
/// settings file change (inotify) and stops sending within one progress tick.
enum PauseCommand {
    static var pause: Verb { Verb(
        name: "pause", summary: "pause camera-roll backup",
        help: """
        Usage: vdrive pause [--config FILE]

        Stops sending backup bytes (within one chunk on a running mount) until 'vdrive resume'.
        Files keep being queued; nothing is lost.
        """,
        run: { try setPaused(true, $0) }) }

    static var resume: Verb { Verb(
        name: "resume", summary: "resume camera-roll backup",
        help: """
        Usage: vdrive resume [--config FILE]

        Lifts a 'vdrive pause'. Other holds (metered network, low battery) still apply.
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
        print(paused ? "Backup paused." : "Backup resumed.")
        if !settings.cameraBackup { print("Note: camera backup is off; turn it on with 'vdrive settings camera-backup on'.") }
        return ExitCode.ok
    }
}
