/// A reason backup is held back. While any hold applies, no byte is sent.
public enum BackupHold: Sendable, Equatable {
    case off
    case paused
    case meteredNetwork
    case batteryLow(percent: Int)

    /// The words the user sees in `.backup/status` and `vdrive status`.
    public var reason: String {
        switch self {
        case .off: return "Camera backup is off"
        case .paused: return "Paused"
        case .meteredNetwork: return "Waiting for an unmetered network"
        case .batteryLow(let percent): return "Battery low (\(percent)%)"
        }
    }

    /// A short identifier for status.json.
    public var code: String {
        switch self {
        case .off: return "off"
        case .paused: return "paused"
        case .meteredNetwork: return "metered-network"
        case .batteryLow: return "battery-low"
        }
    }
}
