import DeviceWiring

extension BackupPaths {
    /// `--config FILE` and `--state DIR` as the backup verbs accept them.
    static func from(_ options: Options) -> (settings: String, state: String) {
        (options.value("--config").map(Paths.absolute) ?? settings,
         options.value("--state").map(Paths.absolute) ?? stateFolder)
    }
}
