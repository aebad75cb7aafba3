import Foundation
import Crypto
import Drive

/// What stays on this device although it sits in the workspace (`.backup/not-synced`):
/// special files (fifos, sockets, devices), symlinks whose target is not UTF-8, names
/// that are not UTF-8 (a folder's contents go with it, so only the folder is listed),
/// and the later names of a file hard-linked before a server was configured (the
/// synced workspace refuses new ones).
/// The Camera Roll and temporary names are out of the workspace by design and not
/// listed. Linux gives such files no `user.*` attributes to say it, so this list does.
extension MirrorEngine {
    /// One line per name, `path: why`, in the order they were made; at most `limit`
    /// lines, then one saying how many more.
    public func localOnlyNames(limit: Int = 10_000) throws -> [String] {
        let names = try drive.committedNames()
        var folders: [UInt64: (parent: UInt64, name: [UInt8])] = [:]
        var firstPath: [UInt64: CommittedName] = [:]
        for n in names where !n.laterName {
            if n.kind == .folder { folders[n.ino] = (n.parent, n.name) }
            firstPath[n.ino] = n
        }
        /// The path's components from the root, nil when a folder above is out of the
        /// workspace (the Camera Roll, a temporary name) or not UTF-8 (listed itself).
        func components(_ n: CommittedName) -> [[UInt8]]? {
            var parts = [n.name]
            var current = n.parent
            for _ in 0..<4096 where current != 1 {
                guard let f = folders[current], let name = MirrorRules.wireName(f.name),
                      !MirrorRules.isTemporary(name, patterns: settings.excluded + settings.userExcluded) else { return nil }
                parts.append(f.name)
                current = f.parent
            }
            guard current == 1 else { return nil }
            parts.reverse()
            if let top = MirrorRules.wireName(parts[0]), top == MirrorRules.cameraRoll { return nil }
            if let own = MirrorRules.wireName(n.name), MirrorRules.isTemporary(own, patterns: settings.excluded + settings.userExcluded) { return nil }
            return parts
        }
        var lines: [String] = []
        var more = 0
        for n in names {
            let why: String
            if n.kind == .special {
                why = "a fifo, socket or device: special files stay on this device"
            } else if MirrorRules.wireName(n.name) == nil {
                why = "the name is not UTF-8: rename it to sync it"
            } else if n.kind == .symlink, MirrorRules.wireTarget(n.target ?? []) == nil {
                why = "a symlink whose target is not UTF-8: symlinks sync their target as text"
            } else if n.laterName, let first = firstPath[n.ino] {
                why = components(first).map { "a second name of \(Self.shown($0)) (hard-linked): only that name is synced" }
                    ?? "a second name of a file out of the workspace (hard-linked): not synced"
            } else {
                continue
            }
            guard let parts = components(n) else { continue }
            if lines.count < limit { lines.append(Self.shown(parts) + ": " + why) } else { more += 1 }
        }
        if more > 0 { lines.append("… and \(more) more") }
        return lines
    }

    /// A path for a line of text: UTF-8 as it is, other bytes as `\xNN`, and a newline
    /// or a backslash escaped so that each line is one name.
    static func shown(_ parts: [[UInt8]]) -> String {
        parts.map { bytes -> String in
            if let text = MirrorRules.wireName(bytes) {
                return text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
            }
            return bytes.map { b in
                b >= 0x20 && b < 0x7F && b != 0x5C ? String(UnicodeScalar(b)) : "\\x" + Hex.encode([b])
            }.joined()
        }.joined(separator: "/")
    }
}
