import Foundation
import Testing
@testable import Backup

/// A fake `/sys` + `/proc` tree in a temp folder.
struct FakeSystem {
    let root: String
    init() {
        root = FileManager.default.temporaryDirectory.path + "/vdrive-sysfs-\(UUID().uuidString.prefix(8))"
        try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    }
    func remove() { try? FileManager.default.removeItem(atPath: root) }

    func write(_ path: String, _ text: String) {
        let full = root + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! (text + "\n").write(toFile: full, atomically: false, encoding: .utf8)
    }

    func link(_ path: String, to target: String) {
        let full = root + path
        try! FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try! FileManager.default.createSymbolicLink(atPath: full, withDestinationPath: target)
    }

    func battery(_ name: String = "BAT0", capacity: Int, status: String, scope: String? = nil) {
        write("/sys/class/power_supply/\(name)/type", "Battery")
        write("/sys/class/power_supply/\(name)/capacity", String(capacity))
        write("/sys/class/power_supply/\(name)/status", status)
        if let scope { write("/sys/class/power_supply/\(name)/scope", scope) }
    }

    func mains(_ name: String = "AC", online: Bool) {
        write("/sys/class/power_supply/\(name)/type", "Mains")
        write("/sys/class/power_supply/\(name)/online", online ? "1" : "0")
    }

    func defaultRoute(via interface: String, metric: Int = 100) {
        write("/proc/net/route", """
            Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
            \(interface)\t00000000\t0101A8C0\t0003\t0\t0\t\(metric)\t00000000\t0\t0\t0
            \(interface)\t0001A8C0\t00000000\t0001\t0\t0\t\(metric)\t00FFFFFF\t0\t0\t0
            """)
    }

    func policy(nmcli: String? = nil) -> BackupPolicy {
        let answer = nmcli
        return BackupPolicy(power: PowerProbe(root: root),
                            network: SystemNetworkProbe(root: root, run: { _, _ in answer }), probeInterval: 0)
    }
}

@Suite(.tags(.logic)) struct PolicyTests {
    let on = BackupSettings(cameraBackup: true)

    @Test func offAndPausedComeFromSettings() {
        let sys = FakeSystem(); defer { sys.remove() }
        #expect(sys.policy().hold(for: BackupSettings()) == .off)
        #expect(sys.policy().hold(for: BackupSettings(cameraBackup: true, paused: true)) == .paused)
        #expect(sys.policy().hold(for: on) == nil)
        #expect(BackupHold.paused.reason == "Paused")
    }

    @Test func lowBatteryOnBatteryPowerHolds() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery(capacity: 15, status: "Discharging")
        sys.mains(online: false)
        let hold = sys.policy().hold(for: on)
        #expect(hold == .batteryLow(percent: 15))
        #expect(hold?.reason == "Battery low (15%)")
        #expect(sys.policy().hold(for: BackupSettings(cameraBackup: true, batteryThreshold: 10)) == nil)
    }

    @Test func lowBatteryOnACOrChargingDoesNotHold() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery(capacity: 15, status: "Discharging")
        sys.mains(online: true)
        #expect(sys.policy().hold(for: on) == nil)

        let charging = FakeSystem(); defer { charging.remove() }
        charging.battery(capacity: 5, status: "Charging")
        #expect(charging.policy().hold(for: on) == nil)
    }

    @Test func noBatteryMeansOnAC() {
        let sys = FakeSystem(); defer { sys.remove() }
        #expect(PowerProbe(root: sys.root).read() == PowerState(batteryPercent: nil, onExternalPower: true))
        sys.mains(online: false)  // a desktop whose PSU reports nothing useful
        #expect(sys.policy().hold(for: on) == nil)
    }

    @Test func peripheralBatteriesAreIgnored() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery("hidpp_battery_0", capacity: 3, status: "Discharging", scope: "Device")
        #expect(sys.policy().hold(for: on) == nil)
    }

    @Test func fullBatteryAboveThresholdDoesNotHold() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery(capacity: 80, status: "Discharging")
        #expect(sys.policy().hold(for: on) == nil)
    }

    @Test(arguments: [("GENERAL.METERED:yes", true), ("GENERAL.METERED:yes (guessed)", true),
                      ("GENERAL.METERED:no", false), ("GENERAL.METERED:no (guessed)", false)])
    func networkManagerDecidesWhenPresent(_ output: String, _ metered: Bool) {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.defaultRoute(via: "wlp2s0")
        let hold = sys.policy(nmcli: output).hold(for: on)
        #expect(hold == (metered ? .meteredNetwork : nil))
        if metered { #expect(hold?.reason == "Waiting for an unmetered network") }
        #expect(sys.policy(nmcli: output).hold(for: BackupSettings(cameraBackup: true, allowMetered: true)) == nil)
    }

    @Test func withoutNetworkManagerAWwanDeviceIsMetered() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.defaultRoute(via: "mbim0")
        sys.write("/sys/class/net/mbim0/uevent", "DEVTYPE=wwan\nINTERFACE=mbim0")
        #expect(sys.policy().hold(for: on) == .meteredNetwork)
    }

    @Test func withoutNetworkManagerUSBTetheringIsMetered() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.defaultRoute(via: "usb0")
        sys.link("/sys/class/net/usb0/device/driver", to: "../../../../bus/usb/drivers/rndis_host")
        #expect(sys.policy().hold(for: on) == .meteredNetwork)
    }

    @Test func pppIsMeteredEthernetIsNot() {
        let ppp = FakeSystem(); defer { ppp.remove() }
        ppp.defaultRoute(via: "ppp0")
        ppp.write("/sys/class/net/ppp0/type", "512")
        #expect(ppp.policy().hold(for: on) == .meteredNetwork)

        let wired = FakeSystem(); defer { wired.remove() }
        wired.defaultRoute(via: "enp3s0")
        wired.write("/sys/class/net/enp3s0/type", "1")
        wired.link("/sys/class/net/enp3s0/device/driver", to: "../../../../bus/pci/drivers/r8169")
        #expect(wired.policy().hold(for: on) == nil)
    }

    @Test func networkManagerUnknownFallsBackToSysfs() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.defaultRoute(via: "wwan0")
        #expect(sys.policy(nmcli: "GENERAL.METERED:unknown").hold(for: on) == .meteredNetwork)
    }

    @Test func lowestMetricDefaultRouteWins() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.write("/proc/net/route", """
            Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
            wwan0\t00000000\t0101A8C0\t0003\t0\t0\t700\t00000000\t0\t0\t0
            eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
            """)
        let probe = SystemNetworkProbe(root: sys.root, run: { _, _ in nil })
        #expect(probe.defaultRouteInterface() == "eth0")
        #expect(!probe.isMetered())
    }

    @Test func holdsAreCheckedInOrder() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery(capacity: 5, status: "Discharging")
        sys.defaultRoute(via: "ppp0")
        #expect(sys.policy().hold(for: BackupSettings(cameraBackup: true, paused: true)) == .paused)
        #expect(sys.policy().hold(for: on) == .meteredNetwork)
        #expect(sys.policy().hold(for: BackupSettings(cameraBackup: true, allowMetered: true)) == .batteryLow(percent: 5))
    }

    @Test func probeResultsAreCachedButSettingsAreNot() {
        let sys = FakeSystem(); defer { sys.remove() }
        sys.battery(capacity: 50, status: "Discharging")
        let policy = BackupPolicy(power: PowerProbe(root: sys.root), network: FixedNetworkProbe(metered: false), probeInterval: 15)
        #expect(policy.hold(for: on, now: 100) == nil)
        sys.battery(capacity: 5, status: "Discharging")
        #expect(policy.hold(for: on, now: 105) == nil)  // cached
        #expect(policy.hold(for: BackupSettings(cameraBackup: true, paused: true), now: 105) == .paused)
        #expect(policy.hold(for: on, now: 116) == .batteryLow(percent: 5))
    }
}
