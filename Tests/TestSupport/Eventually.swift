import Foundation

/// What `eventually` throws when its deadline passes: the event it waited for.
public struct NeverHappened: Error, CustomStringConvertible {
    public let description: String
}

/// Waits for something another thread or process brings about, polling `condition`
/// every `poll` seconds; throws `NeverHappened`, naming `what`, once `seconds` pass.
/// The deadline turns a hang into a failure and is generous: nothing is timed by it.
public func eventually(_ what: @autoclosure () -> String, within seconds: Double = 30, poll: Double = 0.01,
                       _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while true {
        if try condition() { return }
        guard Date() < deadline else { break }
        usleep(UInt32(poll * 1_000_000))
    }
    throw NeverHappened(description: "never happened within \(seconds) s: \(what())")
}
