import Foundation
import Backup

/// What the workspace holds and how a conflict copy is named (Docs/sync.md, "What is
/// synced", "Conflicts").
public enum MirrorRules {
    /// The camera roll's folder at the root: the backup's, per device, never the workspace's
    /// (the backup's rule names it).
    public static let cameraRoll = CameraRollRules.folderName

    /// Where a node waits when its place was taken before its own move arrived.
    public static let movingPrefix = ".vdrive-moving-"

    /// Names editors and tools give their temporary files: never sent (a save through a
    /// temporary name is sent once, under its final name).
    public static let temporaryPatterns = [".vdrive-moving-*", ".~lock.*#", "*.swp", "*.swx", "*~", ".goutputstream-*", "*.part", ".#*", "*.crdownload", ".nfs*"]

    /// Whether a name is one of `patterns` (shell globs, `fnmatch`).
    public static func isTemporary(_ name: String, patterns: [String] = temporaryPatterns) -> Bool {
        patterns.contains { fnmatch($0, name, FNM_PERIOD) == 0 || fnmatch($0, name, 0) == 0 }
    }

    /// Whether a drive path (`Docs/a.txt`) is in the synced workspace by its place: not
    /// the Camera Roll or anything in it. (Its names decide too: `wireName`, `isTemporary`.)
    public static func isInWorkspace(path: String) -> Bool {
        path != cameraRoll && !path.hasPrefix(cameraRoll + "/")
    }

    /// The name as the server takes it: UTF-8 text without NUL; nil when the local name
    /// cannot be one (such a file stays local, listed as not synced).
    public static func wireName(_ bytes: [UInt8]) -> String? {
        guard !bytes.isEmpty, !bytes.contains(0), let text = String(validating: bytes, as: UTF8.self) else { return nil }
        return text
    }

    /// A symlink's target as the server takes it: UTF-8 text; nil when it cannot be one
    /// (such a link stays local, listed as not synced, as a name that is not UTF-8).
    public static func wireTarget(_ bytes: [UInt8]) -> String? {
        guard !bytes.isEmpty, !bytes.contains(0) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    /// `name (conflict from <device> <YYYY-MM-DD HHMM>).ext`, numbered when that is taken
    /// too (`… 2)`, `… 3)`). `taken` answers whether a name is in use in the folder.
    public static func conflictName(_ name: String, device: String, at seconds: Int64, taken: (String) -> Bool) -> String {
        let (stem, ext) = split(name)
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        let stamp = String(format: "%04d-%02d-%02d %02d%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
                           Int(parts.tm_hour), Int(parts.tm_min))
        var n = 1
        while true {
            let label = "conflict from \(device) \(stamp)" + (n == 1 ? "" : " \(n)")
            let candidate = fitted(stem, "(\(label))", ext)
            if !taken(candidate) { return candidate }
            n += 1
        }
    }

    /// The permission bits that give `permissions` the executable bit the workspace says
    /// (execute for whoever may read, as `chmod +x` does), nil when it already has it.
    public static func permissions(_ permissions: UInt32, executable: Bool) -> UInt32? {
        guard (permissions & 0o100 != 0) != executable else { return nil }
        return executable ? permissions | ((permissions & 0o444) >> 2) : permissions & ~UInt32(0o111)
    }

    /// The stem and the extension (with its dot) of a name; a dot-file has no extension.
    static func split(_ name: String) -> (String, String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }

    /// `stem label ext` within 255 bytes, shortening the stem when needed.
    private static func fitted(_ stem: String, _ label: String, _ ext: String) -> String {
        var stem = stem
        while (stem + " " + label + ext).utf8.count > 255, !stem.isEmpty { stem.removeLast() }
        return stem + " " + label + ext
    }
}
