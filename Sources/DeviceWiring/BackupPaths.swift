/// Where the backup commands find their files. The mount uses the same places, so the
/// commands work on a running mount's state as well as on a stopped one.
enum BackupPaths {
    /// `$XDG_CONFIG_HOME/vdrive/settings.json`.
    static var settings: String { Paths.configHome + "/settings.json" }
    /// The state folder: `status`, `status.json`, `backup.lock` and the catalog.
    static var stateFolder: String { Paths.dataHome + "/drive" }
    /// The drive's catalog database inside a state folder.
    static func catalog(in stateFolder: String) -> String { stateFolder + "/catalog.sqlite" }

    /// `--config FILE` and `--state DIR` as the backup verbs accept them.
    static func from(_ options: Options) -> (settings: String, state: String) {
        (options.value("--config").map(Paths.absolute) ?? settings,
         options.value("--state").map(Paths.absolute) ?? stateFolder)
    }
}
