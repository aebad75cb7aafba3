import Foundation
import Storage

/// The user's backup settings, kept in `$XDG_CONFIG_HOME/vdrive/settings.json`.
/// Unknown keys in the file are kept when we rewrite it (other pieces may own them).
public struct BackupSettings: Sendable, Equatable {
    public var cameraBackup = false
    public var allowMetered = false
    public var paused = false
    /// Below this battery percentage, and not charging, backup waits.
    public var batteryThreshold = 20

    public init(cameraBackup: Bool = false, allowMetered: Bool = false, paused: Bool = false, batteryThreshold: Int = 20) {
        self.cameraBackup = cameraBackup; self.allowMetered = allowMetered
        self.paused = paused; self.batteryThreshold = batteryThreshold
    }

    /// The keys as they appear in the file and on the command line.
    public enum Key: String, CaseIterable, Sendable {
        case cameraBackup = "camera-backup"
        case allowMetered = "allow-metered"
        case paused = "paused"
        case batteryThreshold = "battery-threshold"
    }

    public func value(_ key: Key) -> String {
        switch key {
        case .cameraBackup: return cameraBackup ? "on" : "off"
        case .allowMetered: return allowMetered ? "on" : "off"
        case .paused: return paused ? "on" : "off"
        case .batteryThreshold: return String(batteryThreshold)
        }
    }

    /// Sets a key from user text: on/off/true/false/yes/no/1/0, or 0–100 for the threshold.
    public mutating func set(_ key: Key, _ text: String) throws {
        switch key {
        case .cameraBackup: cameraBackup = try Self.parseBool(text, key)
        case .allowMetered: allowMetered = try Self.parseBool(text, key)
        case .paused: paused = try Self.parseBool(text, key)
        case .batteryThreshold:
            guard let v = Int(text), (0...100).contains(v) else {
                throw SettingsError.badValue(key: key.rawValue, value: text, expected: "a percentage from 0 to 100")
            }
            batteryThreshold = v
        }
    }

    static func parseBool(_ text: String, _ key: Key) throws -> Bool {
        switch text.lowercased() {
        case "on", "true", "yes", "1": return true
        case "off", "false", "no", "0": return false
        default: throw SettingsError.badValue(key: key.rawValue, value: text, expected: "on or off")
        }
    }
}

public enum SettingsError: Error, CustomStringConvertible {
    case badValue(key: String, value: String, expected: String)
    case unreadable(path: String, reason: String)
    case unknownKey(String)

    public var description: String {
        switch self {
        case .badValue(let key, let value, let expected): return "\(key): '\(value)' is not \(expected)"
        case .unreadable(let path, let reason): return "\(path): \(reason)"
        case .unknownKey(let key):
            return "unknown setting '\(key)'; known: \(BackupSettings.Key.allCases.map(\.rawValue).joined(separator: ", "))"
        }
    }
}

/// Reads and writes the settings file. Writes are atomic (temporary file + rename), so a
/// reader (the engine's watcher) never sees half a file.
public struct SettingsFile: Sendable {
    public let path: String
    public init(path: String) { self.path = path }

    /// The settings; defaults when the file does not exist.
    public func load() throws -> BackupSettings {
        guard let data = FileManager.default.contents(atPath: path) else { return BackupSettings() }
        let object = try parse(data)
        var settings = BackupSettings()
        for key in BackupSettings.Key.allCases {
            guard let raw = object[key.rawValue] else { continue }
            let text: String
            switch raw {
            case let b as Bool: text = b ? "on" : "off"
            case let n as NSNumber: text = n.stringValue
            case let s as String: text = s
            default: throw SettingsError.unreadable(path: path, reason: "\(key.rawValue) has an unexpected type")
            }
            try settings.set(key, text)
        }
        return settings
    }

    public func save(_ settings: BackupSettings) throws {
        var object: [String: Any] = [:]
        if let data = FileManager.default.contents(atPath: path) { object = (try? parse(data)) ?? [:] }
        object[BackupSettings.Key.cameraBackup.rawValue] = settings.cameraBackup
        object[BackupSettings.Key.allowMetered.rawValue] = settings.allowMetered
        object[BackupSettings.Key.paused.rawValue] = settings.paused
        object[BackupSettings.Key.batteryThreshold.rawValue] = settings.batteryThreshold
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
        try AtomicFile.write(data + Data("\n".utf8), to: path)
    }

    /// Loads, changes, saves.
    public func update(_ change: (inout BackupSettings) throws -> Void) throws -> BackupSettings {
        var settings = try load()
        try change(&settings)
        try save(settings)
        return settings
    }

    private func parse(_ data: Data) throws -> [String: Any] {
        if data.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x09 || $0 == 0x0D }) { return [:] }
        do {
            guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                throw SettingsError.unreadable(path: path, reason: "not a JSON object")
            }
            return object
        } catch let error as SettingsError {
            throw error
        } catch {
            throw SettingsError.unreadable(path: path, reason: "not valid JSON (\(error.localizedDescription))")
        }
    }
}

/// Whole-file replacement: write a sibling temporary file, rename it over the old one.
/// Readers see the old file or the new one, never a mix.
public enum AtomicFile {
    /// `durable`: fdatasync before the rename (settings); status files skip it.
    public static func write(_ data: Data, to path: String, durable: Bool = true) throws {
        let folder = (path as NSString).deletingLastPathComponent
        if !folder.isEmpty { try FileIO.makeDirectories(folder) }
        let temporary = path + ".tmp-\(getpid())"
        let fd = try FileIO.open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        do {
            try data.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
            if durable { try FileIO.fdatasync(fd) }
        } catch {
            FileIO.close(fd)
            try? FileIO.unlink(temporary)
            throw error
        }
        FileIO.close(fd)
        do {
            try FileIO.rename(temporary, path)
        } catch {
            try? FileIO.unlink(temporary)
            throw error
        }
    }
}
