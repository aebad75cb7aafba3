import Backup
import DeviceWiring

/// `vdrive settings [key [value]]`: shows or changes the backup settings.
enum SettingsCommand {
    static var verb: Verb { Verb(
        name: "settings",
        summary: "show or change settings (camera backup, metered networks, battery, cache size, optimize storage, sync exclusions)",
        help: """
        Usage: vdrive settings [--config FILE]              show every setting
               vdrive settings [--config FILE] KEY          show one
               vdrive settings [--config FILE] KEY VALUE    change one

        Keys:
          camera-backup      on|off  back up the Camera Roll folder (default off)
          allow-metered      on|off  also upload over metered networks (default off)
          paused             on|off  the same as 'vdrive pause' / 'vdrive resume'
          battery-threshold  0-100   on battery, wait below this charge (default 20)
          cache-size         SIZE    bytes the drive keeps of what the server could give back
                                     (fetched blocks; with optimize-storage, backed-up
                                     originals) before dropping the least recently used
                                     (20G, 500M; default: 10% of the disk holding the state
                                     folder, at least 1G)
          optimize-storage   on|off  also drop backed-up Camera Roll originals (done) and
                                     synced workspace files the server holds, unless pinned
                                     ('vdrive pin', user.vdrive.pin), when over cache-size;
                                     they stay listed and are fetched again when read
                                     (default off)
          sync-exclude       PATTERNS  names the synced workspace leaves out, besides the
                                     built-in temporary names (.~lock.*#, *.swp, *~, …):
                                     shell globs matched against each file's or folder's
                                     name, separated by spaces ('*.log node_modules');
                                     'none' for none. From the next mount: what a new
                                     pattern matches leaves the workspace on every device
                                     (to the server's trash) and stays here; what it no
                                     longer matches is sent

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
            let residency = try loadOrFail { try ResidencySettings.load(file.path) }
            for key in ResidencySettings.Key.allCases { print("\(key.rawValue) = \(residency.value(key))") }
            print("\(WorkspaceSettings.key) = \(try loadOrFail { try WorkspaceSettings.load(file.path) }.shown)")
            return ExitCode.ok
        }
        if let key = ResidencySettings.Key(rawValue: name) { return try residency(key, args, file.path) }
        if name == WorkspaceSettings.key {
            guard args.count == 2 else {
                print(try loadOrFail { try WorkspaceSettings.load(file.path) }.shown)
                return ExitCode.ok
            }
            try change(file.path) { "\(name) = \(try WorkspaceSettings.update(file.path, args[1]).shown)" }
            print("A running mount uses it from its next mount: names it matches then leave the workspace (to the server's trash), names it no longer matches are sent.")
            return ExitCode.ok
        }
        guard let key = BackupSettings.Key(rawValue: name) else {
            let known = (BackupSettings.Key.allCases.map(\.rawValue) + ResidencySettings.Key.allCases.map(\.rawValue) + [WorkspaceSettings.key]).joined(separator: ", ")
            throw CLIError("unknown setting '\(name)'; known: \(known)", code: ExitCode.usage)
        }
        guard args.count == 2 else {
            print(settings.value(key))
            return ExitCode.ok
        }
        try change(file.path) { "\(key.rawValue) = \(try file.update { try $0.set(key, args[1]) }.value(key))" }
        return ExitCode.ok
    }

    /// Runs a change of the settings file and prints its line; a bad value is a usage
    /// error, a file that cannot be written is EX_CANTCREAT.
    private static func change(_ path: String, _ body: () throws -> String) throws {
        do {
            print(try body())
        } catch let error as SettingsError {
            throw CLIError(error.description, code: ExitCode.usage)
        } catch {
            throw CLIError("\(path): \(error)", code: ExitCode.cantCreate)
        }
    }

    static func loadOrFail(_ file: SettingsFile) throws -> BackupSettings {
        try loadOrFail { try file.load() }
    }

    static func loadOrFail<T>(_ load: () throws -> T) throws -> T {
        do { return try load() } catch { throw CLIError("\(error)", code: ExitCode.config) }
    }

    /// The drive's keys (cache-size, optimize-storage), in the same file.
    private static func residency(_ key: ResidencySettings.Key, _ args: [String], _ path: String) throws -> Int32 {
        guard args.count == 2 else {
            print(try loadOrFail { try ResidencySettings.load(path) }.value(key))
            return ExitCode.ok
        }
        try change(path) { "\(key.rawValue) = \(try ResidencySettings.update(path, key, args[1]).value(key))" }
        return ExitCode.ok
    }
}
