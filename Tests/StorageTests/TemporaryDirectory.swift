import Foundation

/// A fresh folder under the system's temporary directory, removed by `remove()`.
struct TemporaryDirectory {
    let path: String
    init(_ label: String = "vdrive-test") {
        let base = FileManager.default.temporaryDirectory.path
        path = "\(base)/\(label)-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    func remove() { try? FileManager.default.removeItem(atPath: path) }
}
