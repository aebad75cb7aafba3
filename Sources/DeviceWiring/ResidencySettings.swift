import Foundation
import Backup
import Drive

/// `cache-size` and `optimize-storage`: the drive's keys in the same settings file as
/// the backup's (`settings.json`; each piece keeps the other's keys when it rewrites).
public struct ResidencySettings: Equatable {
    /// Bytes of what the server could give back that may stay here (see `CacheBound`);
    /// nil: the default (`defaultCacheSize`).
    var cacheSize: Int64?
    var optimizeStorage = false

    public enum Key: String, CaseIterable {
        case cacheSize = "cache-size"
        case optimizeStorage = "optimize-storage"
    }

    /// 10% of the disk holding the state folder, at least 1 GiB: a cache that can never
    /// fill the disk by itself (the rest is the user's), and still holds a browsing
    /// session of photos and a few videos on a laptop's disk (256 GB: 25 GB).
    static func defaultCacheSize(stateFolder: String) -> Int64 {
        var st = statvfs()
        var path = stateFolder
        while statvfs(path, &st) != 0 && path != "/" { path = (path as NSString).deletingLastPathComponent }
        let disk = Int64(st.f_blocks) * Int64(st.f_frsize)
        return max(1 << 30, disk / 10)
    }

    func bound(stateFolder: String) -> CacheBound {
        CacheBound(bytes: cacheSize ?? Self.defaultCacheSize(stateFolder: stateFolder), optimizeStorage: optimizeStorage)
    }

    /// The value as shown; the default cache size with what it is on this machine.
    public func value(_ key: Key, stateFolder: String = BackupPaths.stateFolder) -> String {
        switch key {
        case .cacheSize:
            return cacheSize.map(Self.formatSize)
                ?? "default (\(ByteCountText.format(Self.defaultCacheSize(stateFolder: stateFolder))): 10% of the disk)"
        case .optimizeStorage: return optimizeStorage ? "on" : "off"
        }
    }

    mutating func set(_ key: Key, _ text: String) throws {
        switch key {
        case .cacheSize:
            if text.lowercased() == "default" { cacheSize = nil; return }
            guard let bytes = Self.parseSize(text) else {
                throw SettingsError.badValue(key: key.rawValue, value: text, expected: "a size such as 20G, 500M or 1T (or 'default')")
            }
            cacheSize = bytes
        case .optimizeStorage:
            switch text.lowercased() {
            case "on", "true", "yes", "1": optimizeStorage = true
            case "off", "false", "no", "0": optimizeStorage = false
            default: throw SettingsError.badValue(key: key.rawValue, value: text, expected: "on or off")
            }
        }
    }

    /// "20G", "500M", "64K", "1T" (powers of 1024), or plain bytes.
    public static func parseSize(_ text: String) -> Int64? {
        let t = text.trimmingCharacters(in: .whitespaces).uppercased()
        let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var digits = Substring(t), unit: Int64 = 1
        if t.hasSuffix("B") { digits = digits.dropLast() }
        if let last = digits.last, let u = units[last] { unit = u; digits = digits.dropLast() }
        guard let n = Int64(digits), n >= 0, n <= Int64.max / unit else { return nil }
        return n * unit
    }

    static func formatSize(_ bytes: Int64) -> String {
        for (suffix, unit) in [("T", Int64(1) << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)] where bytes >= unit && bytes % unit == 0 {
            return "\(bytes / unit)\(suffix)"
        }
        return String(bytes)
    }

    // MARK: The file

    public static func load(_ path: String) throws -> ResidencySettings {
        var out = ResidencySettings()
        let object = try SettingsObject.read(path)
        for key in Key.allCases {
            guard let raw = object[key.rawValue] else { continue }
            switch raw {
            case let b as Bool: try out.set(key, b ? "on" : "off")
            case let n as NSNumber: try out.set(key, n.stringValue)
            case let s as String: try out.set(key, s)
            default: throw SettingsError.unreadable(path: path, reason: "\(key.rawValue) has an unexpected type")
            }
        }
        return out
    }

    /// Changes one key, keeping every other key of the file (the backup's).
    public static func update(_ path: String, _ key: Key, _ text: String) throws -> ResidencySettings {
        var settings = try load(path)
        try settings.set(key, text)
        var object = try SettingsObject.read(path)
        object[Key.cacheSize.rawValue] = settings.cacheSize.map { $0 as Any } ?? "default"
        object[Key.optimizeStorage.rawValue] = settings.optimizeStorage
        try SettingsObject.write(object, to: path)
        return settings
    }
}
