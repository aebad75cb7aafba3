import Foundation
import Backup
import Client
import Crypto
import Drive
import Storage

/// Connects the drive's block cache to the server, the backup queue and the mirror:
/// blocks not held here are fetched through `ServerBlocks`; every `checkInterval`
/// seconds the cache bound is applied (settings re-read each time, so a change applies
/// without a remount), with the backup queue and the mirror's synced tree as the ledger
/// of what is safely on the server (`DriveLedger`); pinned content is fetched in the
/// background (`PinFetcher`).
final class ResidencyWiring: @unchecked Sendable {   // its state is set in init, then read
    private let fs: DriveFileSystem
    private let stateFolder: String
    private let settingsPath: String
    private let ledger: DriveLedger
    private let bound = BackgroundThread(name: "vd-cache-bound")
    let pins: PinFetcher

    /// `VDRIVE_CACHE_CHECK_SECONDS` (tests: 1) or 10.
    static var checkInterval: Double {
        ProcessInfo.processInfo.environment["VDRIVE_CACHE_CHECK_SECONDS"].flatMap(Double.init) ?? 10
    }

    /// `backup`: queues again what the server lost, and wakes the engine for it.
    init(fs: DriveFileSystem, stateFolder: String, settingsPath: String, remote: RemoteConfig?, backup: BackupHook) {
        self.fs = fs
        ledger = DriveLedger(backup: backup)
        self.stateFolder = stateFolder
        self.settingsPath = settingsPath
        pins = PinFetcher(fs: fs, interval: Self.checkInterval)
        guard let remote else { return }
        do {
            let client = try remote.client(timeouts: ServerBlocks.timeouts)
            fs.blockCache.remote = ServerBlocks(client: client, transfers: TransferHold(settings: SettingsFile(path: settingsPath), policy: BackupWiring.policy()))
        } catch {
            printError("blocks not held here cannot be fetched: \(error)")
        }
    }

    /// `VDRIVE_CACHE_PASS_LOG` set (the tests): each pass ends with a line in the mount's
    /// log. A pass that drops nothing says nothing otherwise, and a test that checks what
    /// the bound must keep has to know that passes ran after its writes.
    static var logsPasses: Bool { ProcessInfo.processInfo.environment["VDRIVE_CACHE_PASS_LOG"] != nil }

    func start() {
        pins.start()
        let logsPasses = Self.logsPasses
        bound.start { [self] in
            var passes = 0
            repeat {
                applyBound()
                passes += 1
                if logsPasses { printError("cache bound pass \(passes) done") }
            } while !bound.pause(Self.checkInterval)
        }
    }

    func stop() {
        pins.stop()
        bound.stop()
    }

    private func applyBound() {
        do {
            let settings = try ResidencySettings.load(settingsPath)
            try fs.blockCache.enforce(settings.bound(stateFolder: stateFolder), ledger: ledger)
        } catch {
            printError("the cache bound could not be applied: \(error); tried again in \(Int(Self.checkInterval)) s")
        }
    }
}

