import Foundation
import Synchronization
import Testing
import Crypto
import Storage
@testable import Backup

/// Slows each progress step so a test can act while a PATCH is in flight.
final class SlowTransport: BackupTransport, Sendable {
    let inner: InMemoryTransport
    init(_ inner: InMemoryTransport) { self.inner = inner }
    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> { try inner.presentContents(hashes) }
    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan { try inner.createUpload(manifest) }
    func uploadOffset(url: String) throws -> Int64 { try inner.uploadOffset(url: url) }
    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64 {
        try inner.patch(url: url, offset: offset, chunk: chunk, chunkSHA256: chunkSHA256) { sent in
            usleep(2_000)
            return progress(sent)
        }
    }
    func recordFile(_ record: BackupRecord) throws { try inner.recordFile(record) }
    func watermark() throws -> BackupWatermark? { try inner.watermark() }
    func setWatermark(_ watermark: BackupWatermark) throws { try inner.setWatermark(watermark) }
}

final class SwitchableNetworkProbe: NetworkProbe, Sendable {
    private let metered = Mutex(true)
    func set(_ value: Bool) { metered.withLock { $0 = value } }
    func isMetered() -> Bool { metered.withLock { $0 } }
}

@Suite(.tags(.logic)) struct EngineTests {
    let quietPolicy = noHoldPolicy

    @Test func wakesOnEnqueueUploadsAndWritesStatus() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: quietPolicy)
        try engine.start()
        defer { engine.stop() }
        try eventually("idle status") { engine.status().state == .idle }

        let a = try h.commit(try Fixtures.bytes("IMG_0003.jpg"), path: "Camera Roll/IMG_0003.jpg")
        let b = try h.commit(try Fixtures.bytes("IMG_0100.heic"), path: "Camera Roll/IMG_0100.heic")
        engine.wake()
        try eventually("both done") { try h.state(a) == .done && h.state(b) == .done }
        try eventually("status idle again") { engine.status().state == .idle && engine.status().itemsDone == 2 }
        // The files follow the in-memory status (written just after it).
        try eventually("status files idle") {
            (try StatusFile(stateFolder: h.stateFolder).read())?.state == .idle
                && (try? String(contentsOfFile: h.stateFolder + "/status", encoding: .utf8))?.hasPrefix("Up to date · 2 photos and videos, ") == true
        }
        #expect(try h.item(b).captureDate == "2025-12-24T20:30:00")
        try eventually("watermark pushed") { h.server.storedWatermark?.sequence == b.changeSequence }
        #expect(engine.stop())
    }

    @Test func offByDefaultAndTurningOnStartsBackup() throws {
        let h = try Harness(); defer { h.remove() }
        let c = try h.commit(testBytes(1000, seed: 40), path: "Camera Roll/a.jpg")
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: quietPolicy)
        try engine.start()
        defer { engine.stop() }
        try eventually("off status") { engine.status().state == .off }
        #expect(h.server.stats.bytesReceived == 0)
        _ = try SettingsFile(path: h.settingsPath).update { $0.cameraBackup = true }  // `vdrive settings camera-backup on`
        try eventually("done after turning on") { try h.state(c) == .done }
    }

    @Test func pauseFromAnotherProcessHoldsAndResumeContinues() throws {
        let h = try Harness(); defer { h.remove() }
        let file = SettingsFile(path: h.settingsPath)
        try file.save(BackupSettings(cameraBackup: true))
        let slow = SlowTransport(h.server)
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: slow, blobs: h.blobs, policy: quietPolicy)
        try engine.start()
        defer { engine.stop() }
        let c = try h.commit(testBytes(24 * MiB, seed: 41), path: "Camera Roll/movie.mp4")
        engine.wake()
        try eventually("uploading") { h.server.stats.patches > 0 }  // blocks in flight
        _ = try file.update { $0.paused = true }  // `vdrive pause`: only the file changes
        try eventually("paused status") { engine.status().waitingReason == "Paused" }
        let sent = h.server.stats.bytesReceived
        #expect(try h.state(c) == .pending)
        #expect(sent < Int64(24 * MiB))
        // Held: nothing more goes out, whatever wakes the engine.
        engine.wake()
        try eventually("status written") { (try StatusFile(stateFolder: h.stateFolder).read())?.waitingCode == "paused" }
        #expect(h.server.stats.bytesReceived == sent)

        _ = try file.update { $0.paused = false }
        try eventually("done after resume") { try h.state(c) == .done }
        #expect(h.server.content(c.hash) != nil)
    }

    @Test func stopWithUploadInFlightIsQuickAndResumesNextTime() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let bytes = testBytes(16 * MiB, seed: 42)
        let c = try h.commit(bytes, path: "Camera Roll/long.mov")
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: SlowTransport(h.server), blobs: h.blobs,
                                  policy: quietPolicy)
        try engine.start()
        // The engine's default keeps several blocks in flight: stop while PATCHes run.
        try eventually("uploading") { h.server.stats.patches > 0 }
        #expect(engine.stop())  // the thread finished: the PATCHes were cancelled, not waited for
        #expect(try h.state(c) == .pending)
        #expect(h.server.content(c.hash) == nil)
        #expect(h.server.stats.bytesReceived < Int64(bytes.count))

        // Next mount: a new engine on the same database resumes where the server is.
        let next = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: quietPolicy)
        try next.start()
        defer { next.stop() }
        try eventually("done after restart") { try h.state(c) == .done }
        #expect(h.server.content(c.hash) == bytes)
        let resent = h.bytesReceived(for: c) - Int64(bytes.count)
        #expect(resent == 0)  // the server kept the cancelled PATCH's bytes: nothing twice
    }

    @Test func meteredHoldIsRecheckedAndLifts() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let network = SwitchableNetworkProbe()
        var configuration = h.engineConfiguration
        configuration.holdRecheckInterval = 0.05
        let engine = BackupEngine(configuration: configuration, transport: h.server, blobs: h.blobs,
                                  policy: BackupPolicy(power: PowerProbe(root: "/nonexistent"), network: network, probeInterval: 0))
        try engine.start()
        defer { engine.stop() }
        let c = try h.commit(testBytes(5000, seed: 46), path: "Camera Roll/m.jpg")
        engine.wake()
        try eventually("metered status") {
            engine.status().line == "Waiting for an unmetered network · 1 item (5.0 KB) left"
        }
        #expect(h.server.stats.bytesReceived == 0)
        network.set(false)  // joined Wi-Fi: no event reaches us, the re-check finds it
        try eventually("done on an unmetered network") { try h.state(c) == .done }
    }

    @Test func serverDownSaysWhyAndRecovers() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        var configuration = h.engineConfiguration
        configuration.uploader.retry = RetryPolicy(base: 0.2, cap: 0.4)
        h.server.inject(.refuse, on: .watermark)  // the sync at start
        h.server.inject(.refuse, on: .createUpload, times: 3)
        let c = try h.commit(testBytes(5000, seed: 47), path: "Camera Roll/n.jpg")
        let engine = BackupEngine(configuration: configuration, transport: h.server, blobs: h.blobs, policy: quietPolicy)
        try engine.start()
        defer { engine.stop() }
        try eventually("retry status") {
            (engine.status().waitingReason ?? "").hasPrefix("Retrying after an error (connection refused)")
        }
        try eventually("the failed sync is reported") { engine.status().lastError?.contains("connection refused") == true }
        try eventually("done once the server is back") { try h.state(c) == .done }
        #expect(try h.item(c).attempts == 3)
    }

    @Test func retryFromAnotherProcessWakesARunningEngine() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        h.server.inject(.forbidden, on: .createUpload)
        let c = try h.commit(testBytes(800, seed: 48), path: "Camera Roll/o.jpg")
        let engine = BackupEngine(configuration: h.engineConfiguration, transport: h.server, blobs: h.blobs, policy: quietPolicy)
        try engine.start()
        defer { engine.stop() }
        try eventually("failed") { try h.state(c) == .failed }
        try eventually("status shows it") { engine.status().itemsFailed == 1 }
        // `vdrive backup retry`: its own connection, then a nudge through the state folder.
        let other = BackupQueue(db: try Database(path: h.db.path))
        #expect(try other.retryFailed() == 1)
        try BackupEngine.nudge(stateFolder: h.stateFolder)
        try eventually("done after the nudge") { try h.state(c) == .done }
    }

    @Test func runOnceDrainsAndSyncs() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        let present = testBytes(500, seed: 43)
        h.server.store(present)
        try h.commit(present, path: "Camera Roll/known.jpg")
        try h.commit(testBytes(700, seed: 44), path: "Camera Roll/new.jpg")

        let sync = try BackupEngine.runOnce(task: .sync, configuration: h.engineConfiguration, transport: h.server,
                                            blobs: h.blobs, policy: quietPolicy)
        #expect(sync.status.itemsDone == 1)
        let backup = try BackupEngine.runOnce(task: .backup, configuration: h.engineConfiguration, transport: h.server,
                                              blobs: h.blobs, policy: quietPolicy)
        #expect(backup.sent == 1)
        #expect(backup.status.state == .idle)
        #expect(h.server.stats.bytesReceived == 700)
        #expect(try StatusFile(stateFolder: h.stateFolder).read()?.state == .idle)
    }

    @Test func runOnceWaitsForAnotherUploaderAndForHolds() throws {
        let h = try Harness(); defer { h.remove() }
        try SettingsFile(path: h.settingsPath).save(BackupSettings(cameraBackup: true))
        try h.commit(testBytes(100, seed: 45), path: "Camera Roll/x.jpg")
        let lock = try #require(try UploadLock.acquire(stateFolder: h.stateFolder))
        let busy = try BackupEngine.runOnce(task: .backup, configuration: h.engineConfiguration, transport: h.server,
                                            blobs: h.blobs, policy: quietPolicy)
        #expect(busy.busy)
        #expect(busy.status.waitingReason == "Another vdrive process is backing up")
        _ = lock

        _ = try SettingsFile(path: h.settingsPath).update { $0.paused = true }
        let held = try BackupEngine.runOnce(task: .backup, configuration: h.engineConfiguration, transport: h.server,
                                            blobs: h.blobs, policy: quietPolicy)
        #expect(held.hold == .paused)
        #expect(h.server.stats.bytesReceived == 0)
    }
}
