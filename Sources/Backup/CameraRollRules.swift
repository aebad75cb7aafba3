/// Which names the backup sees. The drive asks these before it enqueues a commit.
public enum CameraRollRules {
    /// The workspace folder whose files are backed up, at any depth.
    public static let folderName = "Camera Roll"

    /// True for a workspace path inside the camera roll ("Camera Roll/2024/IMG_1.jpg"),
    /// false for the folder itself and for paths whose any component is a temporary name
    /// (a file inside a hidden folder is as temporary as the folder).
    public static func isInCameraRoll(_ path: String) -> Bool {
        var components = path.split(separator: "/", omittingEmptySubsequences: true)
        guard components.count >= 2, components.first == Substring(folderName) else { return false }
        components.removeFirst()
        return !components.contains { isTemporaryName(String($0)) }
    }

    /// True for names copy tools and file managers write before renaming into place:
    /// hidden dot-names (this includes rsync's `.name.XXXXXX`, vim's `.name.swp`, GNOME's
    /// `.goutputstream-XXXXXX`), partial downloads (`.part`, `.partial`, `.crdownload`,
    /// `.download`), editor and tool leftovers (`~` suffix, `.tmp`, `.temp`, `.swp`), and
    /// Office/LibreOffice lock files (`~$name`, `.~lock.name#`).
    public static func isTemporaryName(_ name: String) -> Bool {
        if name.isEmpty || name == "." || name == ".." { return true }
        if name.hasPrefix(".") || name.hasPrefix("~$") || name.hasSuffix("~") { return true }
        let lower = name.lowercased()
        for suffix in temporarySuffixes where lower.hasSuffix(suffix) { return true }
        return false
    }

    static let temporarySuffixes = [".part", ".partial", ".crdownload", ".download", ".tmp", ".temp", ".swp", ".filepart"]

    /// The name shown in the `.backup/<state>/` folders: the path inside the camera roll
    /// with each "/" shown as "∕" (U+2215), so `Camera Roll/2024/IMG_1.jpg` reads
    /// `2024∕IMG_1.jpg`: one flat, readable name that keeps the folders it came from.
    public static func flattenedName(_ path: String) -> String {
        var rest = Substring(path)
        let prefix = folderName + "/"
        if rest.hasPrefix(prefix) { rest = rest.dropFirst(prefix.count) }
        return rest.split(separator: "/", omittingEmptySubsequences: true).joined(separator: "\u{2215}")
    }
}
