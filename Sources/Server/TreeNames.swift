import Foundation
import Protocol

/// The name a node restored from the trash takes when its own is taken in its folder:
/// `name (restored)`, then `name (restored 2)`, … A file keeps its extension last
/// (`note (restored).txt`), so it still opens with the same program; a name starting
/// with its only dot (`.bashrc`) has none. The result stays within 255 bytes: the part
/// before the mark is cut at a character boundary when it must be.
enum TreeNames {
    static func restored(_ name: String, kind: TreeNodeKind, attempt: Int) -> String {
        let mark = attempt <= 1 ? " (restored)" : " (restored \(attempt))"
        var stem = Substring(name), suffix = Substring("")
        if kind == .file, let dot = name.lastIndex(of: "."), dot != name.startIndex, name.index(after: dot) != name.endIndex {
            stem = name[..<dot]
            suffix = name[dot...]
        }
        // A name restored before counts on: "note (restored).txt" taken is "note (restored 2).txt".
        stem = withoutMark(stem)
        // A suffix that leaves no room is not an extension worth keeping.
        if suffix.utf8.count + mark.utf8.count >= Validation.maxNameBytes {
            stem = Substring(name)
            suffix = ""
        }
        let room = Validation.maxNameBytes - mark.utf8.count - suffix.utf8.count
        while stem.utf8.count > room { stem = stem.dropLast() }
        return String(stem) + mark + String(suffix)
    }

    /// `stem` without a trailing ` (restored)` or ` (restored N)`.
    private static func withoutMark(_ stem: Substring) -> Substring {
        if stem.hasSuffix(" (restored)") { return stem.dropLast(" (restored)".count) }
        guard stem.hasSuffix(")"), let open = stem.range(of: " (restored ", options: .backwards) else { return stem }
        let digits = stem[open.upperBound..<stem.index(before: stem.endIndex)]
        return !digits.isEmpty && digits.allSatisfy(\.isASCII) && digits.allSatisfy(\.isNumber) ? stem[..<open.lowerBound] : stem
    }
}
