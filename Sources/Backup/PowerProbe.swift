/// Battery and mains state from `/sys/class/power_supply`.
///
/// A supply whose `scope` is "Device" (a wireless mouse, a headset) is not the system's
/// battery and is ignored. Several system batteries (some ThinkPads) are averaged.
/// No system battery at all means a desktop: on AC.
public struct PowerState: Sendable, Equatable {
    /// Percent charge of the system battery, nil without one.
    public var batteryPercent: Int?
    /// A mains/USB supply is online, or a battery reports Charging/Full.
    public var onExternalPower: Bool
}

public struct PowerProbe: Sendable {
    let sysfs: SysfsReader

    /// `root`: "/" in production; a test's temp folder holding `sys/class/power_supply/...`.
    public init(root: String = "/") { sysfs = SysfsReader(root: root) }

    public func read() -> PowerState {
        let base = "/sys/class/power_supply"
        var capacities: [Int] = []
        var external = false
        for name in sysfs.list(base) {
            let dir = "\(base)/\(name)"
            if sysfs.read("\(dir)/scope")?.lowercased() == "device" { continue }
            switch sysfs.read("\(dir)/type") {
            case "Battery":
                if let capacity = sysfs.read("\(dir)/capacity").flatMap(Int.init) { capacities.append(capacity) }
                if let status = sysfs.read("\(dir)/status"), status == "Charging" || status == "Full" { external = true }
            case "Mains", "USB", "USB_C", "USB_PD", "USB_DCP", "USB_CDP", "USB_ACA", "Wireless":
                if sysfs.read("\(dir)/online") == "1" { external = true }
            default:
                continue
            }
        }
        if capacities.isEmpty { return PowerState(batteryPercent: nil, onExternalPower: true) }
        let percent = capacities.reduce(0, +) / capacities.count
        return PowerState(batteryPercent: percent, onExternalPower: external)
    }
}
