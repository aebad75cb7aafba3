import Synchronization

/// Decides whether backup may send bytes now, from the settings and the machine's state.
/// Holds are checked in the order a user can act on them: off, paused, network, battery.
///
/// The settings part is checked on every call (cheap, and pause must bite at once); the
/// network and power probes (an `nmcli` run, sysfs reads) are cached for `probeInterval`
/// seconds, because the uploader asks between every two blocks.
public final class BackupPolicy: Sendable {
    let power: PowerProbe
    let network: NetworkProbe
    let probeInterval: Double
    private let cache = Mutex<(at: Double, metered: Bool, power: PowerState)?>(nil)

    public init(power: PowerProbe = PowerProbe(), network: NetworkProbe = SystemNetworkProbe(), probeInterval: Double = 15) {
        self.power = power
        self.network = network
        self.probeInterval = probeInterval
    }

    /// The first hold that applies, or nil when backup may proceed. `now`: monotonic seconds.
    public func hold(for settings: BackupSettings, now: Double = Clock.monotonic()) -> BackupHold? {
        if !settings.cameraBackup { return .off }
        if settings.paused { return .paused }
        let probed = probes(now: now)
        if !settings.allowMetered && probed.metered { return .meteredNetwork }
        if let percent = probed.power.batteryPercent, percent < settings.batteryThreshold, !probed.power.onExternalPower {
            return .batteryLow(percent: percent)
        }
        return nil
    }

    /// Forget the cached probe results (a hold is re-checked on a timer: ask afresh).
    public func refresh() { cache.withLock { $0 = nil } }

    private func probes(now: Double) -> (metered: Bool, power: PowerState) {
        if let cached = cache.withLock({ $0 }), now - cached.at < probeInterval, now >= cached.at {
            return (cached.metered, cached.power)
        }
        let fresh = (at: now, metered: network.isMetered(), power: power.read())
        cache.withLock { $0 = fresh }
        return (fresh.metered, fresh.power)
    }
}
