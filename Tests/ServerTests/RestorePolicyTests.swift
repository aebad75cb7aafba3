import Foundation
import Synchronization
import Testing

/// Policies hold bulk downloads: `vdrive restore` waits while backup is
/// paused or the network is metered, says so on stderr, goes on when the hold is
/// lifted, and `--now` goes ahead regardless. A real server and `vdrive` processes.
@Suite(.tags(.endToEnd), .serialized) struct RestorePolicyTests {
    typealias Fixture = RestoreTests.Fixture

    /// Collects a process's stderr as it comes, to wait for a line.
    final class Collector: Sendable {
        let pipe = Pipe()
        private let text = Mutex("")

        init() {
            let handle = pipe.fileHandleForReading
            Thread { [self] in
                while true {
                    let data = handle.availableData
                    if data.isEmpty { return }
                    text.withLock { $0 += String(decoding: data, as: UTF8.self) }
                }
            }.start()
        }

        var current: String { text.withLock { $0 } }

        /// True once `needle` has been written (within `seconds`).
        func waitFor(_ needle: String, seconds: Double = 30) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if current.contains(needle) { return true }
                usleep(10_000)
            }
            return current.contains(needle)
        }
    }

    static func finished(_ dest: String) -> [String] {
        RestoreTests.restoredFiles(dest).filter { !$0.hasSuffix(".vdrive-restore") }
    }

    /// Paused: the restore lists, says it waits and why, fetches nothing; `vdrive
    /// resume` lets it go on to the end. Paused again, `--now` restores at once.
    @Test func pauseHoldsRestoreUntilResumeOrNow() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        let files = try fx.backUpPhotos(count: 6, size: 300_000, seed: 900, first: 4000, capture: RestoreTests.day("2024-04-04"))
        let settings = fx.dir.path + "/settings.json"
        #expect(try run(vdriveBinary(), ["pause", "--config", settings]).0 == 0)

        let dest = fx.dir.path + "/restored"
        let errors = Collector()
        let before = try fx.serverBytesWritten()
        let process = try fx.startRestore(into: dest, through: nil, arguments: ["--config", settings], stderr: errors.pipe)
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        #expect(errors.waitFor("Restore waiting: Paused. 'vdrive resume' lets it go on, or run the restore with --now"), "\(errors.current)")
        // The restore has listed and stopped at its gate (what it wrote says so); the pause
        // gives a transfer that skipped the gate time to show itself in what follows.
        usleep(300_000)
        #expect(process.isRunning)
        #expect(Self.finished(dest).isEmpty, "nothing restored while paused")
        #expect(try fx.serverBytesWritten() - before < 64 << 10, "no content fetched while paused (the listing only)")

        #expect(try run(vdriveBinary(), ["resume", "--config", settings]).0 == 0)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(errors.current)")
        #expect(errors.current.contains("Restore going on"), "\(errors.current)")
        for (i, f) in files.enumerated() {
            #expect(FileManager.default.contents(atPath: dest + "/Camera Roll/IMG_\(4000 + i).jpg") == Data(f.bytes))
        }

        #expect(try run(vdriveBinary(), ["pause", "--config", settings]).0 == 0)
        let (now, out, err) = try fx.restore(["phone", fx.dir.path + "/now", "--config", settings, "--now"])
        #expect(now == 0, "\(err)")
        #expect(err.contains("Restoring now (--now) although backup is held: Paused."), "\(err)")
        #expect(out.contains("Restored 6 file(s)"), "\(out)")
    }

    /// Starts a restore of the fixture's photos into `dest` under a fake system root
    /// (`environment`) and expects it to wait, saying `held`, having restored nothing.
    static func startHeld(_ fx: Fixture, into dest: String, environment: [String: String], saying held: String) throws -> (Process, Collector) {
        let errors = Collector()
        let process = try fx.startRestore(into: dest, through: nil, arguments: [],
                                          environment: environment, stderr: errors.pipe)
        #expect(errors.waitFor("Restore waiting: " + held), "\(errors.current)")
        #expect(finished(dest).isEmpty, "nothing restored while held")
        return (process, errors)
    }

    /// The same with `--now`: it restores all `count` files at once and says it went
    /// ahead although held (`held`).
    static func restoreNow(_ fx: Fixture, into dest: String, environment: [String: String], saying held: String, count: Int) throws {
        let errors = Collector()
        let now = try fx.startRestore(into: dest, through: nil, arguments: ["--now"],
                                      environment: environment, stderr: errors.pipe)
        now.waitUntilExit()
        #expect(now.terminationStatus == 0, "\(errors.current)")
        #expect(errors.waitFor("although backup is held: " + held), "\(errors.current)")
        #expect(finished(dest).count == count)
    }

    /// A metered network (a fake system root whose default route is a USB-tethered
    /// phone, no nmcli): the restore waits and says so; `--now` goes ahead.
    @Test func meteredNetworkHoldsRestoreUnlessNow() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        _ = try fx.backUpPhotos(count: 2, size: 100_000, seed: 950, first: 5000, capture: RestoreTests.day("2024-05-05"))
        let system = fx.dir.path + "/system"
        try FileManager.default.createDirectory(atPath: system + "/proc/net", withIntermediateDirectories: true)
        try "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\nusb0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
            .write(toFile: system + "/proc/net/route", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: system + "/sys/class/net/usb0/device", withIntermediateDirectories: true)
        try "DRIVER=rndis_host\n".write(toFile: system + "/sys/class/net/usb0/device/uevent", atomically: true, encoding: .utf8)
        let environment = ["VDRIVE_SYSTEM_ROOT": system, "PATH": "/nonexistent"]

        let dest = fx.dir.path + "/restored"
        let (process, _) = try Self.startHeld(fx, into: dest, environment: environment, saying: "Waiting for an unmetered network.")
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        kill(process.processIdentifier, SIGKILL)  // SIGTERM: blocked in processes the test runner starts
        process.waitUntilExit()
        try Self.restoreNow(fx, into: dest, environment: environment, saying: "Waiting for an unmetered network", count: 2)
    }

    /// A battery under the threshold and not charging (a fake system root): the restore
    /// waits like the backup does and says so; charging lets it go; `--now` goes ahead.
    @Test func lowBatteryHoldsRestoreUntilChargingOrNow() throws {
        let fx = try Fixture()
        defer { fx.stop() }
        _ = try fx.backUpPhotos(count: 2, size: 100_000, seed: 960, first: 6000, capture: RestoreTests.day("2024-06-06"))
        let battery = fx.dir.path + "/system/sys/class/power_supply/BAT0"
        try FileManager.default.createDirectory(atPath: battery, withIntermediateDirectories: true)
        try "Battery\n".write(toFile: battery + "/type", atomically: true, encoding: .utf8)
        try "12\n".write(toFile: battery + "/capacity", atomically: true, encoding: .utf8)
        try "Discharging\n".write(toFile: battery + "/status", atomically: true, encoding: .utf8)
        let environment = ["VDRIVE_SYSTEM_ROOT": fx.dir.path + "/system", "PATH": "/nonexistent"]

        let dest = fx.dir.path + "/restored"
        let (process, errors) = try Self.startHeld(fx, into: dest, environment: environment, saying: "Battery low (12%)")
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL); process.waitUntilExit() } }
        // Plugged in: the hold ends and the same process restores everything.
        try "Charging\n".write(toFile: battery + "/status", atomically: true, encoding: .utf8)
        let deadline = Date().addingTimeInterval(60)
        while process.isRunning && Date() < deadline { usleep(100_000) }
        #expect(!process.isRunning, "the restore goes on once the battery charges: \(errors.current)")
        if process.isRunning { return }
        #expect(process.terminationStatus == 0, "\(errors.current)")
        #expect(Self.finished(dest).count == 2)

        try "Discharging\n".write(toFile: battery + "/status", atomically: true, encoding: .utf8)
        try Self.restoreNow(fx, into: fx.dir.path + "/restored-now", environment: environment, saying: "Battery low (12%)", count: 2)
    }
}
