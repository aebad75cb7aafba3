import Foundation
import Synchronization
import Backup
import Storage

/// Whether the device's background transfers other than the camera backup's wait now:
/// content going up from the synced workspace, and content fetched ahead (small files
/// as they arrive, pinned files). The backup's settings and probes decide, as for its
/// uploads: paused, a metered network when metered transfers are not allowed, the battery
/// under its threshold and not charging. "Camera backup off" holds only the backup. A
/// user's read never waits on it (the caller asks only for background work).
final class TransferHold: Sendable {
    private let settings: SettingsFile
    private let policy: BackupPolicy
    /// The last answer, kept one second (prefetch asks per block, the mirror per pass)
    /// unless the settings file changed: a `vdrive pause` holds what is written after it.
    private let cached = Mutex<(at: Double, settings: [Int], held: String?)?>(nil)

    init(settings: SettingsFile, policy: BackupPolicy) {
        self.settings = settings
        self.policy = policy
    }

    /// Why transfers wait now, in the status line's words, or nil.
    func reason() -> String? {
        let now = Clock.monotonic()
        let version = settingsVersion()
        if let c = cached.withLock({ $0 }), now - c.at < 1, now >= c.at, c.settings == version { return c.held }
        var held: String?
        if var s = try? settings.load() {
            s.cameraBackup = true
            switch policy.hold(for: s, now: now) {
            case .paused: held = "paused"
            case .meteredNetwork: held = "waiting for an unmetered network"
            case .batteryLow(let percent): held = "battery low (\(percent)%)"
            case .off, nil: held = nil
            }
        }
        cached.withLock { $0 = (now, version, held) }
        return held
    }

    /// The settings file's identity and change time: a new file (an atomic write) or a
    /// change in place differs from the last one read.
    private func settingsVersion() -> [Int] {
        guard let st = try? FileIO.status(settings.path) else { return [] }
        return [Int(st.st_ino), Int(st.st_size), st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec]
    }
}
