import Foundation

/// Where vdrive keeps its files, following the XDG base directory spec.
public enum Paths {
    public static var home: String { ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory() }

    /// `$XDG_DATA_HOME/vdrive`, else `~/.local/share/vdrive`: drive state, server data.
    public static var dataHome: String {
        if let x = ProcessInfo.processInfo.environment["XDG_DATA_HOME"], x.hasPrefix("/") { return x + "/vdrive" }
        return home + "/.local/share/vdrive"
    }

    /// `$XDG_CONFIG_HOME/vdrive`, else `~/.config/vdrive`: settings, server URL and token.
    public static var configHome: String {
        if let x = ProcessInfo.processInfo.environment["XDG_CONFIG_HOME"], x.hasPrefix("/") { return x + "/vdrive" }
        return home + "/.config/vdrive"
    }

    /// `$XDG_RUNTIME_DIR/vdrive`, else the data folder: pid files and sockets.
    public static var runtimeDir: String {
        if let x = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], x.hasPrefix("/") { return x + "/vdrive" }
        return dataHome + "/run"
    }

    public static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        if path == "~" { return home }
        if path.hasPrefix("~/") { return home + path.dropFirst(1) }
        return FileManager.default.currentDirectoryPath + "/" + path
    }
}
