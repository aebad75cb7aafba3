import Backup

/// `vdrive settings [key [value]]`: shows or changes the backup settings.
enum SettingsCommand {
    static var verb: Verb { Verb(
        name: "settings",
        summary: "show or change settings (camera backup, metered networks, battery)",
        help: """
        Usage: vdrive settings [--config FILE]              show every setting
               vdrive settings [--config FILE] KEY          show one
               vdrive settings [--config FILE] KEY VALUE    change one

        Keys:
          camera-backup      on|off  back up the Camera Roll folder (default off)
          allow-metered      on|off  also upload over metered networks (default off)
          paused             on|off  the same as 'vdrive pause' / 'vdrive resume'
          battery-threshold  0-100   on battery, wait below this charge (default 20)

        The file is $XDG_CONFIG_HOME/vdrive/settings.json; a running mount picks up a
        change at once.
        """,
        run: run) }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--config"], flags: [])
        let file = SettingsFile(path: BackupPaths.from(options).settings)
        let args = options.positionals
        guard args.count <= 2 else { throw CLIError.usage("settings takes at most a key and a value; see --help") }
        let settings = try loadOrFail(file)
        guard let name = args.first else {
            for key in BackupSettings.Key.allCases { print("\(key.rawValue) = \(settings.value(key))") }
            return ExitCode.ok
        }
        guard let key = BackupSettings.Key(rawValue: name) else {
            throw CLIError(SettingsError.unknownKey(name).description, code: ExitCode.usage)
        }
        guard args.count == 2 else {
            print(settings.value(key))
            return ExitCode.ok
        }
        do {
            let updated = try file.update { try $0.set(key, args[1]) }
            print("\(key.rawValue) = \(updated.value(key))")
        } catch let error as SettingsError {
            throw CLIError(error.description, code: ExitCode.usage)
        } catch {
            throw CLIError("\(file.path): \(error)", code: ExitCode.cantCreate)
        }
        return ExitCode.ok
    }

    static func loadOrFail(_ file: SettingsFile) throws -> BackupSettings {
        do { return try file.load() } catch { throw CLIError("\(error)", code: ExitCode.config) }
    }
}
