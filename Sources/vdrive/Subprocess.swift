import Foundation

/// Runs a program and returns its exit status, or nil when it could not start.
enum Subprocess {
    static func run(_ path: String, _ arguments: [String]) -> Int32? {
        guard FileManager.default.isExecutableFile(atPath: path) else { return nil }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = arguments
        do { try p.run() } catch { return nil }
        p.waitUntilExit()
        return p.terminationStatus
    }
}
