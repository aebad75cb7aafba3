import Foundation
import Testing
@testable import Backup

@Suite(.tags(.logic)) struct SettingsTests {
    /// A settings path in a fresh folder, removed when the test ends.
    func withTemporaryPath(_ body: (String) throws -> Void) throws {
        let folder = FileManager.default.temporaryDirectory.path + "/vdrive-settings-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try body(folder + "/settings.json")
    }

    @Test func defaultsWhenTheFileIsMissing() throws {
        try withTemporaryPath { path in
            let settings = try SettingsFile(path: path).load()
            #expect(settings == BackupSettings(cameraBackup: false, allowMetered: false, paused: false, batteryThreshold: 20))
        }
    }

    @Test func roundTripKeepsOtherKeys() throws {
        try withTemporaryPath { path in
            try AtomicFile.write(Data(#"{"server-url": "http://127.0.0.1:8080", "paused": true}"#.utf8), to: path)
            let file = SettingsFile(path: path)
            #expect(try file.load().paused)
            _ = try file.update { try $0.set(.cameraBackup, "on"); try $0.set(.batteryThreshold, "35") }
            let object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
            #expect(object["server-url"] as? String == "http://127.0.0.1:8080")
            #expect(object["camera-backup"] as? Bool == true)
            #expect(object["battery-threshold"] as? Int == 35)
            #expect(try file.load() == BackupSettings(cameraBackup: true, paused: true, batteryThreshold: 35))
        }
    }

    @Test func badValuesAreRefusedWithTheKeyAndValue() throws {
        var settings = BackupSettings()
        #expect(throws: SettingsError.self) { try settings.set(.batteryThreshold, "150") }
        #expect(throws: SettingsError.self) { try settings.set(.paused, "maybe") }
        do { try settings.set(.allowMetered, "perhaps") } catch {
            #expect("\(error)" == "allow-metered: 'perhaps' is not on or off")
        }
    }

    @Test func brokenFileIsReportedNotReplaced() throws {
        try withTemporaryPath { path in
            try AtomicFile.write(Data("{not json".utf8), to: path)
            #expect(throws: SettingsError.self) { try SettingsFile(path: path).load() }
        }
    }

    @Test func watcherSeesAnAtomicReplace() throws {
        try withTemporaryPath { path in
            let seen = StopFlag()
            let watcher = try FileChangeWatcher(path: path) { seen.set() }
            defer { watcher.stop() }
            try AtomicFile.write(Data("x".utf8), to: path + ".other")  // another file: ignored
            #expect(!seen.isSet)
            try SettingsFile(path: path).save(BackupSettings(paused: true))
            try eventually("change seen") { seen.isSet }
        }
    }
}
