import Foundation

/// A fresh folder under the system's temporary directory, one per test, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "vdrive-test") {
        path = "\(FileManager.default.temporaryDirectory.path)/\(label)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    public func remove() { try? FileManager.default.removeItem(atPath: path) }
}
