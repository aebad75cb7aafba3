import Testing
import Foundation
import TestSupport
import TestTraits

/// Tier three: the model-based test of the synced workspace. Three real mounts, each with
/// its own state and token on one real server (both back ends), carry out a seeded random
/// schedule of file and folder operations on overlapping paths, with unmounts, server
/// restarts and kill -9s of a mount (MirrorModelSchedule); at the end every tree is the
/// same and no version the rule requires is lost (MirrorModelRun says which and why).
///
/// `VDRIVE_MIRROR_SEED=N` replays a run, `VDRIVE_MIRROR_OPS=N` sets its length (500 by
/// default, across the devices). A failure prints the seed and every step carried out.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct WorkspaceMirrorModelTests {
    /// One seed for both back ends in a run, so a failure on one replays on both.
    static let options = MirrorModelOptions.fromEnvironment(operations: 500, devices: 3)

    @Test(arguments: Backend.allCases)
    func randomOperationsOnThreeDevicesConvergeAndKeepEveryVersion(_ backend: Backend) throws {
        let options = Self.options
        let dir = TemporaryDirectory("vdrive-mirror-model"); defer { dir.remove() }
        let names = (0..<options.devices).map { "device\($0)" }
        let (server, drives) = try WorkspaceMirrorEndToEndTests.devices(dir, backend, names)
        defer { drives.forEach { $0.stop() }; server.stop() }
        let world = MountedMirrorWorld(server: server, drives: drives)
        let model = MirrorModelRun(options, world: world)
        let report: MirrorModelReport
        do { report = try model.run() } catch {
            model.printTrace()
            WorkspaceMirrorEndToEndTests.printLogs(drives)
            throw error
        }
        print("mirror model (\(backend)): \(report.summary)")
        if !report.problems.isEmpty {
            model.printTrace()
            WorkspaceMirrorEndToEndTests.printLogs(drives)
        }
        #expect(report.problems.isEmpty, "replay with \(model.replay): \(report.problems.joined(separator: "\n"))")
        #expect(report.keptVersions == report.requiredVersions)
    }
}

/// The model's devices: the end-to-end tests' mounts and server.
final class MountedMirrorWorld: MirrorModelWorld {
    let server: LocalServer
    let drives: [MountedDrive]

    init(server: LocalServer, drives: [MountedDrive]) {
        self.server = server
        self.drives = drives
    }

    var deviceCount: Int { drives.count }
    func mountPoint(_ device: Int) -> String { drives[device].mountPoint }
    func unmount(_ device: Int) throws { try drives[device].unmount() }
    func mount(_ device: Int) throws { try drives[device].start() }
    func mountForeground(_ device: Int) throws { try drives[device].startForeground() }
    func kill9(_ device: Int) { drives[device].kill9() }
    func stopServer() { server.stopServer() }
    func startServer() throws { try server.start() }
    func waitForSameTree(within seconds: Double) throws { try WorkspaceMirrorEndToEndTests.waitForSameTree(drives, within: seconds) }
    func serverVersionHashes() -> Set<String> { Set(server.records("SELECT DISTINCT hash FROM tree_versions")) }
    func printLogs() { WorkspaceMirrorEndToEndTests.printLogs(drives) }
}
