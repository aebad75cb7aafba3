import Foundation
import Backup
import WorkspaceMirror

/// `sync-exclude`: the user's name patterns the synced workspace leaves out, besides the
/// built-in temporary names (`MirrorRules.temporaryPatterns`), in the same settings file
/// as the backup's keys. Shell globs matched against each name (`*.log`, `node_modules`,
/// `build`), never a path: a folder that matches is left out with what is in it.
public struct WorkspaceSettings: Equatable {
    public var syncExclude: [String] = []

    public static let key = "sync-exclude"

    /// Patterns as the user writes them, separated by spaces (`'*.log node_modules'`);
    /// `none` for no pattern of one's own.
    public static func parse(_ text: String) throws -> [String] {
        if text.trimmingCharacters(in: .whitespaces).lowercased() == "none" { return [] }
        let patterns = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init)
        for p in patterns {
            if p.contains("/") {
                throw SettingsError.badValue(key: key, value: p, expected: "a name pattern (a pattern matches a file's or folder's name, never a path: 'build', not 'src/build')")
            }
            if p.utf8.count > 255 || p.contains("\0") { throw SettingsError.badValue(key: key, value: p, expected: "a name pattern of at most 255 bytes") }
        }
        guard patterns.count <= 200 else {
            throw SettingsError.badValue(key: key, value: "\(patterns.count) patterns", expected: "at most 200 patterns")
        }
        return patterns
    }

    /// The value as shown: the user's patterns, and the built-in ones beside them.
    public var shown: String {
        (syncExclude.isEmpty ? "none" : syncExclude.joined(separator: " "))
            + " (besides the built-in temporary names: \(MirrorRules.temporaryPatterns.filter { !$0.hasPrefix(MirrorRules.movingPrefix) }.joined(separator: " ")))"
    }

    public static func load(_ path: String) throws -> WorkspaceSettings {
        var out = WorkspaceSettings()
        guard let raw = try SettingsObject.read(path)[key] else { return out }
        guard let list = raw as? [String] else { throw SettingsError.unreadable(path: path, reason: "\(key) is not a list of patterns") }
        out.syncExclude = try parse(list.joined(separator: " "))
        return out
    }

    /// Sets the user's patterns, keeping every other key of the file.
    public static func update(_ path: String, _ text: String) throws -> WorkspaceSettings {
        let settings = WorkspaceSettings(syncExclude: try parse(text))
        var object = try SettingsObject.read(path)
        object[key] = settings.syncExclude
        try SettingsObject.write(object, to: path)
        return settings
    }
}
