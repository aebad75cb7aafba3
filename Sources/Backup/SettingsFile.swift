import Foundation

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
