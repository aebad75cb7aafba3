import DeviceWiring

extension BackupPaths {
    /// `--config FILE` and `--state DIR` as the backup verbs accept them. Without
    /// `--state`, the drive the current folder is on (its mount names its state folder),
    /// else the default one: `vdrive status` in a drive mounted with `--state` is that
    /// drive's.
    static func from(_ options: Options) -> (settings: String, state: String) {
        (options.value("--config").map(Paths.absolute) ?? settings,
         options.value("--state").map(Paths.absolute) ?? WorkspacePath.currentDriveState ?? stateFolder)
    }
}
