import Foundation

/// Where a backed-up file appears in `Backups/`, as pure functions of its record
/// (the names table makes the choice permanent, RecordsTable.swift):
///
///     Backups/<device>/<year>/<month>/<name>                       the current version
///     Backups/<device>/<year>/<month>/.versions/<stem> (<date>)<ext>   each older version
///
/// - The folder is the current version's capture date (else its mtime), in UTC.
/// - `<name>` is the file's name on the device. A second file of the same device
///   whose name is taken in that folder gets `<stem> (2)<ext>`, then `(3)`, …, in the
///   order the drive first saw them (the server's order): a name once given never changes.
/// - An older version is named by the file's name in the folder plus the time the
///   server recorded that version, `IMG_0001 (2026-11-30 121503).jpg` (UTC); two
///   versions recorded in the same second get the later one's sequence added.
enum BackupsLayout {
    static let versionsFolder = ".versions"

    /// "2019/07": the UTC year and month of `seconds`.
    static func folder(for seconds: Int64) -> String {
        let p = utc(seconds)
        return String(format: "%04d/%02d", Int(p.tm_year) + 1900, Int(p.tm_mon) + 1)
    }

    private static func utc(_ seconds: Int64) -> tm {
        var t = time_t(seconds)
        var parts = tm()
        gmtime_r(&t, &parts)
        return parts
    }

    /// The last component of a device path.
    static func baseName(of path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// "IMG_0001.jpg" → ("IMG_0001", ".jpg"); a leading dot is part of the stem.
    static func split(_ name: String) -> (stem: String, ext: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }

    /// The `n`th name (n ≥ 2) for `name` when it is taken: "IMG_0001 (2).jpg".
    static func suffixed(_ name: String, _ n: Int) -> String {
        let (stem, ext) = split(name)
        return "\(stem) (\(n))\(ext)"
    }

    /// The first of `name`, `name (2)`, `name (3)`, … that `taken` does not hold.
    static func freeName(_ name: String, taken: (String) throws -> Bool) rethrows -> String {
        if try !taken(name) { return name }
        var n = 2
        while try taken(suffixed(name, n)) { n += 1 }
        return suffixed(name, n)
    }

    /// "2026-11-30 121503": the UTC date and time of `seconds`.
    static func stamp(_ seconds: Int64) -> String {
        let p = utc(seconds)
        return String(format: "%04d-%02d-%02d %02d%02d%02d", Int(p.tm_year) + 1900, Int(p.tm_mon) + 1, Int(p.tm_mday),
                      Int(p.tm_hour), Int(p.tm_min), Int(p.tm_sec))
    }

    /// The names of a file's older versions in `.versions/`, oldest first. `versions`
    /// are the older versions (sequence, recorded time), oldest first.
    static func versionNames(of name: String, _ versions: [(sequence: Int64, recorded: Int64)]) -> [String] {
        let (stem, ext) = split(name)
        var used = Set<String>()
        return versions.map { v in
            var label = stamp(v.recorded)
            if used.contains(label) { label += "-\(v.sequence)" }
            used.insert(label)
            return "\(stem) (\(label))\(ext)"
        }
    }
}
