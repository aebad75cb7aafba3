import Foundation

/// A fresh folder under the system's temporary directory, one per test, removed by `remove()`
/// unless `VDRIVE_KEEP_TEMP` is set (then kept, and named, for a failure's post-mortem).
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "vdrive-test") {
        path = "\(FileManager.default.temporaryDirectory.path)/\(label)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    public func remove() {
        if ProcessInfo.processInfo.environment["VDRIVE_KEEP_TEMP"] != nil {
            print("kept: \(path)")
            return
        }
        try? FileManager.default.removeItem(atPath: path)
    }
}
