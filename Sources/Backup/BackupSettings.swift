import Foundation

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
