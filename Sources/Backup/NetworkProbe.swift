import Foundation

/// Whether the network backup would use now is metered.
public protocol NetworkProbe: Sendable {
    func isMetered() -> Bool
}

/// Runs a program and returns its standard output, or nil when it cannot be run or fails.
public typealias CommandRunner = @Sendable (_ program: String, _ arguments: [String]) -> String?

/// The production probe. Finds the default route's interface in `/proc/net/route` (then
/// `/proc/net/ipv6_route`), asks NetworkManager about it when `nmcli` exists
/// (`GENERAL.METERED: yes|no (guessed)|unknown`), and otherwise, or when NetworkManager
/// does not know, looks at the interface in sysfs: a wwan device, a ppp link, or a USB
/// tethering driver (cdc_ether, rndis_host, cdc_ncm, cdc_mbim, qmi_wwan, ipheth) is metered.
/// No default route: not metered (there is nothing to send over; the transport fails).
public struct SystemNetworkProbe: NetworkProbe {
    let sysfs: SysfsReader
    let run: CommandRunner

    public init(root: String = "/", run: @escaping CommandRunner = SystemNetworkProbe.runProgram) {
        sysfs = SysfsReader(root: root)
        self.run = run
    }

    public func isMetered() -> Bool {
        guard let interface = defaultRouteInterface() else { return false }
        if let answer = run("nmcli", ["-t", "-f", "GENERAL.METERED", "dev", "show", interface]),
           let metered = Self.parseNmcli(answer) {
            return metered
        }
        return isMobileInterface(interface)
    }

    /// "GENERAL.METERED:yes (guessed)" → true; "…:no" → false; "…:unknown" → nil.
    static func parseNmcli(_ output: String) -> Bool? {
        for line in output.split(separator: "\n") where line.hasPrefix("GENERAL.METERED:") {
            let value = line.dropFirst("GENERAL.METERED:".count).lowercased()
            if value.hasPrefix("yes") { return true }
            if value.hasPrefix("no") { return false }
        }
        return nil
    }

    /// The interface of the IPv4 default route with the lowest metric, else IPv6's.
    func defaultRouteInterface() -> String? {
        var best: (metric: Int, interface: String)?
        for line in (sysfs.read("/proc/net/route") ?? "").split(separator: "\n").dropFirst() {
            let f = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            guard f.count >= 8, f[1] == "00000000", f[7] == "00000000",
                  let flags = Int(f[3], radix: 16), flags & 1 == 1 else { continue }  // RTF_UP
            let metric = Int(f[6]) ?? 0
            if best == nil || metric < best!.metric { best = (metric, String(f[0])) }
        }
        if let best { return best.interface }
        for line in (sysfs.read("/proc/net/ipv6_route") ?? "").split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 10, f[0] == "00000000000000000000000000000000", f[1] == "00", f[9] != "lo" else { continue }
            return String(f[9])
        }
        return nil
    }

    static let tetheringDrivers: Set<String> = [
        "cdc_ether", "rndis_host", "cdc_ncm", "cdc_mbim", "qmi_wwan", "ipheth", "huawei_cdc_ncm", "cdc_eem",
    ]

    func isMobileInterface(_ interface: String) -> Bool {
        let dir = "/sys/class/net/\(interface)"
        if interface.hasPrefix("ppp") || interface.hasPrefix("wwan") || interface.hasPrefix("wwp") { return true }
        if sysfs.read("\(dir)/type") == "512" { return true }  // ARPHRD_PPP
        if let uevent = sysfs.read("\(dir)/uevent"),
           uevent.split(separator: "\n").contains(where: { $0 == "DEVTYPE=wwan" }) { return true }
        if let driver = sysfs.linkTargetName("\(dir)/device/driver"), Self.tetheringDrivers.contains(driver) { return true }
        if let uevent = sysfs.read("\(dir)/device/uevent"),
           let line = uevent.split(separator: "\n").first(where: { $0.hasPrefix("DRIVER=") }),
           Self.tetheringDrivers.contains(String(line.dropFirst("DRIVER=".count))) { return true }
        return false
    }

    /// Runs `program` found on PATH with a 5 s limit; nil when absent, failing or slow.
    public static let runProgram: CommandRunner = { program, arguments in
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        guard let executable = path.split(separator: ":").map({ "\($0)/\(program)" })
            .first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A probe with a fixed answer (tests; `allow-metered` setups).
public struct FixedNetworkProbe: NetworkProbe {
    public let metered: Bool
    public init(metered: Bool) { self.metered = metered }
    public func isMetered() -> Bool { metered }
}
