import Backup
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The policies for bulk downloads, which a restore obeys as backup does: it is held by the holds that
/// hold backup (`vdrive pause`, a metered network unless `allow-metered`, a low battery
/// off external power), except "camera backup is off", which is about uploads. Held,
/// the transfer threads wait before their next block or file (a block in flight is
/// finished, so a hold bites within 4 MiB per transfer), and the wait is said once on
/// stderr with what lifts it; `--now` opens the gate for that run.
///
/// The settings file and the probes are read at most every `checkInterval` seconds
/// (the probes themselves are cached by BackupPolicy), not before every block.
final class RestoreGate: Sendable {
    private let settingsPath: String?
    private let policy: BackupPolicy
    private let checkInterval: Double
    /// The last check, and the hold last announced (nil: none, or announced as lifted).
    private let state = Mutex<(checkedAt: Double, hold: BackupHold?, announced: BackupHold?)>((-.infinity, nil, nil))

    /// `settingsPath` nil: `--now`, never held.
    init(settingsPath: String?, policy: BackupPolicy, checkInterval: Double = 0.5) {
        self.settingsPath = settingsPath; self.policy = policy; self.checkInterval = checkInterval
    }

    /// The hold that applies now, if any.
    func hold() -> BackupHold? {
        guard let settingsPath else { return nil }
        // An unreadable settings file holds nothing here: the mount and `vdrive settings` say what is wrong with it.
        var settings = (try? SettingsFile(path: settingsPath).load()) ?? BackupSettings()
        settings.cameraBackup = true
        return policy.hold(for: settings)
    }

    /// Returns at once when nothing holds the restore; else says why (once for all
    /// threads) and waits until it is lifted.
    func waitWhileHeld(report: RestoreReport) {
        guard settingsPath != nil else { return }
        while true {
            let now = Clock.monotonic()
            let (current, announce) = state.withLock { s -> (BackupHold?, String?) in
                if now - s.checkedAt >= checkInterval {
                    s.checkedAt = now
                    s.hold = hold()
                }
                var line: String?
                if let hold = s.hold, s.announced != hold {
                    s.announced = hold
                    line = "Restore waiting: \(hold.reason). \(Self.whatLifts(hold)), or run the restore with --now to go ahead anyway."
                } else if s.hold == nil, s.announced != nil {
                    s.announced = nil
                    line = "Restore going on: nothing holds it any more."
                }
                return (s.hold, line)
            }
            if let announce { report.note(announce) }
            if current == nil { return }
            usleep(UInt32(checkInterval * 1_000_000))
        }
    }

    static func whatLifts(_ hold: BackupHold) -> String {
        switch hold {
        case .paused: return "'vdrive resume' lets it go on"
        case .meteredNetwork: return "It goes on on an unmetered network ('vdrive settings allow-metered on' allows metered ones)"
        case .batteryLow: return "It goes on when the machine is plugged in or charged (see 'vdrive settings battery-threshold')"
        case .off: return "'vdrive settings camera-backup on' lets it go on"
        }
    }
}
