/// Where the backup commands find their files. The mount uses the same places, so the
/// commands work on a running mount's state as well as on a stopped one.
public enum BackupPaths {
    /// `$XDG_CONFIG_HOME/vdrive/settings.json`.
    public static var settings: String { Paths.configHome + "/settings.json" }
    /// The state folder: `status`, `status.json`, `backup.lock` and the catalog.
    public static var stateFolder: String { Paths.dataHome + "/drive" }
    /// The drive's catalog database inside a state folder.
    public static func catalog(in stateFolder: String) -> String { stateFolder + "/catalog.sqlite" }
}
