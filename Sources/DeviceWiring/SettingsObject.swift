import Foundation
import Backup

/// `settings.json` as a JSON object, for the pieces that keep their keys in it beside
/// the backup's (the drive's cache keys, the workspace's patterns): each rewrites only
/// its own keys and keeps every other.
enum SettingsObject {
    /// The file's object; empty when there is no file (or only whitespace).
    static func read(_ path: String) throws -> [String: Any] {
        guard let data = FileManager.default.contents(atPath: path),
              !data.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x09 || $0 == 0x0D }) else { return [:] }
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw SettingsError.unreadable(path: path, reason: "not a JSON object")
        }
        return object
    }

    /// Writes `object` whole (atomically, durably), keys sorted.
    static func write(_ object: [String: Any], to path: String) throws {
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
        try AtomicFile.write(data + Data("\n".utf8), to: path)
    }
}
