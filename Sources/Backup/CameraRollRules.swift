/// What is in the Camera Roll, in one place: photos, videos and their edit sidecars inside
/// its folder, by extension; never temporary names; nothing else (Docs/operations.md,
/// "What the camera backup takes"). The drive knows none of it: the backup's follower of
/// the drive's changes asks `isInCameraRoll` of each committed or renamed file's path, the
/// mirror leaves `folderName` out of the workspace, the wiring makes the folder in a new
/// workspace.
public enum CameraRollRules {
    /// The workspace folder at the root whose files are backed up, at any depth.
    public static let folderName = "Camera Roll"
    private static let folderPrefix = Array((folderName + "/").utf8)

    /// True for a workspace path the camera backup takes: inside the camera roll
    /// ("Camera Roll/2024/IMG_1.jpg"), no component a temporary name (a file inside a
    /// hidden folder is as temporary as the folder), and a photo, a video or an edit
    /// sidecar by its extension (`kind(ofName:)`). False for the folder itself, and for
    /// anything else dropped there (`README.md`, `notes.txt`, `.DS_Store`, `Thumbs.db`).
    public static func isInCameraRoll(_ path: String) -> Bool {
        // Asked of every file the drive commits: a path elsewhere is turned down on its bytes.
        guard path.utf8.starts(with: folderPrefix) else { return false }
        var components = path.split(separator: "/", omittingEmptySubsequences: true)
        guard components.count >= 2, components.first == Substring(folderName) else { return false }
        components.removeFirst()
        guard !components.contains(where: { isTemporaryName(String($0)) }), let name = components.last else { return false }
        return kind(ofName: String(name)) != nil
    }

    /// What the camera backup takes.
    public enum MediaKind: String, Sendable, CaseIterable {
        case photo, video
        /// Edits and metadata written beside a photo: Apple Photos' `.aae` (the
        /// non-destructive edit of an iPhone photo) and XMP (`.xmp`: Lightroom, darktable,
        /// digiKam ratings, keywords and develop settings). Taken: they are small, and a
        /// photo restored without them loses the user's edits, which are work, not cache.
        case sidecar
    }

    /// The kind of a file by its extension, case-insensitive (`IMG_1.JPG`); nil for
    /// anything else, including names without an extension. The extension decides
    /// because a commit names a path before anything reads the bytes; `kind(ofHeader:)`
    /// recognizes the same formats by their first bytes, for a caller that has them.
    public static func kind(ofName name: String) -> MediaKind? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        let ext = name[name.index(after: dot)...].lowercased()
        if photoExtensions.contains(ext) { return .photo }
        if videoExtensions.contains(ext) { return .video }
        if sidecarExtensions.contains(ext) { return .sidecar }
        return nil
    }

    /// Still images cameras and phones write: JPEG, HEIF/HEIC (iPhone), AVIF, PNG
    /// (screenshots), GIF, WebP, TIFF, JPEG XL, MPO (stereo), DNG and camera raw files.
    public static let photoExtensions: Set<String> = [
        "jpg", "jpeg", "jpe", "jfif", "heic", "heif", "hif", "avif", "png", "gif", "webp", "tif", "tiff", "jxl", "mpo",
        "dng", "cr2", "cr3", "crw", "nef", "nrw", "arw", "srf", "sr2", "orf", "rw2", "raf", "pef", "srw", "x3f",
        "3fr", "erf", "kdc", "mrw", "rwl", "iiq", "dcr",
    ]

    /// Videos cameras and phones write: QuickTime/MP4 family (iPhone, Android, GoPro),
    /// 3GPP, AVCHD (`.mts`, `.m2ts`), AVI, Matroska/WebM, MPEG program streams, 360 cameras' `.insv`.
    public static let videoExtensions: Set<String> = [
        "mov", "mp4", "m4v", "3gp", "3g2", "mts", "m2ts", "avi", "mkv", "webm", "mpg", "mpeg", "insv",
    ]

    public static let sidecarExtensions: Set<String> = ["xmp", "aae"]

    /// The kind of a file by its first bytes (at least 12; 16 is plenty), or nil when
    /// they are none of the formats above: JPEG, PNG, GIF, TIFF (and the TIFF-based
    /// raw files: DNG, NEF, CR2, ARW, ...), WebP and AVI (RIFF), ISO base media (`ftyp`:
    /// HEIC, AVIF, MP4, MOV, 3GP, CR3), Matroska/WebM, MPEG-PS, Fujifilm RAF, Olympus
    /// ORF and Panasonic RW2, XMP and AAE (XML).
    public static func kind(ofHeader h: [UInt8]) -> MediaKind? {
        func starts(_ p: [UInt8], at o: Int = 0) -> Bool { h.count >= o + p.count && Array(h[o..<(o + p.count)]) == p }
        if starts([0xFF, 0xD8, 0xFF]) { return .photo }                                        // JPEG
        if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return .photo }          // PNG
        if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return .photo }
        if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return .photo }  // TIFF, most raw
        if starts([0x49, 0x49, 0x52, 0x4F]) || starts([0x49, 0x49, 0x55, 0x00]) { return .photo }  // ORF, RW2
        if starts(Array("FUJIFILMCCD-RAW".utf8)) { return .photo }                             // RAF
        if starts([0xFF, 0x0A]) || starts([0x00, 0x00, 0x00, 0x0C, 0x4A, 0x58, 0x4C, 0x20]) { return .photo }  // JPEG XL
        if starts(Array("RIFF".utf8)) && starts(Array("WEBP".utf8), at: 8) { return .photo }
        if starts(Array("RIFF".utf8)) && starts(Array("AVI ".utf8), at: 8) { return .video }
        if starts(Array("ftyp".utf8), at: 4), h.count >= 12 {
            let brand = String(decoding: h[8..<12], as: UTF8.self)
            let photoBrands: Set<String> = ["heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1", "avif", "avis", "crx "]
            return photoBrands.contains(brand) ? .photo : .video                               // mp4, qt, 3gp, M4V, ...
        }
        if starts([0x00, 0x00, 0x00]) && h.count >= 8 && ["moov", "mdat", "wide", "free", "skip"].contains(String(decoding: h[4..<8], as: UTF8.self)) {
            return .video                                                                      // old QuickTime without ftyp
        }
        if starts([0x1A, 0x45, 0xDF, 0xA3]) { return .video }                                  // Matroska, WebM
        if starts([0x00, 0x00, 0x01, 0xBA]) { return .video }                                  // MPEG-PS
        if h.count >= 189 && h[0] == 0x47 && h[188] == 0x47 { return .video }                  // MPEG-TS
        if h.count >= 197 && h[4] == 0x47 && h[196] == 0x47 { return .video }                   // M2TS (4-byte timecode)
        let text = String(decoding: h.prefix(64), as: UTF8.self)
        if text.hasPrefix("<?xml") || text.hasPrefix("<x:xmpmeta") || text.hasPrefix("<?xpacket") || text.hasPrefix("\u{FEFF}<?xml") {
            return .sidecar                                                                    // XMP; AAE is a property list in XML
        }
        return nil
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
