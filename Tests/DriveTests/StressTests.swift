import Testing
import Foundation
import Synchronization

/// Seeded random operations on a real mount and on a plain folder side by side (the
/// suite's stand-in for xfstests' fsstress, which CI cannot fetch): create, write at
/// random and far sparse offsets, append, truncate up and down, rename, link, unlink,
/// mkdir, rmdir, chmod, fsync, close and reopen, every read checked against an
/// in-memory model (StressModel.swift), then the two final trees compared (SHA-256,
/// size, mode, link count), again after a remount. The seed is printed; replay with
///
///     VDRIVE_STRESS_SEED=N swift test --filter StressTests
///
/// Other knobs: VDRIVE_STRESS_OPS (3000), VDRIVE_STRESS_THREAD_OPS (400 per writer),
/// VDRIVE_STRESS_SPARSE_MIB (16: the farthest sparse offset; 1024 passes too, but the
/// final comparisons then read every GiB-sized file through both sides, which takes
/// minutes: Docs/posix.md).
@Suite(.tags(.mount), .needsMount, .serialized) struct StressTests {
    @Test func randomOperationsMatchAPlainFolderAndTheModel() throws {
        let p = StressParameters.fromEnvironment()
        print("StressTests: seed \(p.seed), \(p.operations) operations, sparse up to \(p.sparseLimit >> 20) MiB (VDRIVE_STRESS_SEED=\(p.seed) replays it)")
        let plain = TemporaryDirectory("vdrive-stress-plain")
        defer { plain.remove() }
        let drive = try MountedDrive(label: "vdrive-stress")
        defer { drive.stop() }

        let pool = pseudoRandomBytes(3 << 20, seed: p.seed)
        let run = StressRun(roots: [plain.path + "/stress", drive.path("stress")], parameters: p, seed: p.seed,
                            operations: p.operations, pool: pool)
        let started = Date()
        do { try run.run() } catch {
            Issue.record("\(error)")
            return
        }
        print("StressTests: \(p.operations) operations in \(String(format: "%.1f", Date().timeIntervalSince(started))) s: "
              + run.counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        try expectSameTrees(plain.path + "/stress", drive.path("stress"), seed: p.seed, when: "after the run")
        try drive.unmount()
        try drive.start()
        try expectSameTrees(plain.path + "/stress", drive.path("stress"), seed: p.seed, when: "after a remount")
    }

    @Test func fourWritersAtOnceOnDisjointFolders() throws {
        let p = StressParameters.fromEnvironment()
        print("StressTests (4 writers): seed \(p.seed), \(p.threadOperations) operations each (VDRIVE_STRESS_SEED=\(p.seed) replays it)")
        let plain = TemporaryDirectory("vdrive-stress-plain")
        defer { plain.remove() }
        let drive = try MountedDrive(label: "vdrive-stress")
        defer { drive.stop() }

        let pool = pseudoRandomBytes(3 << 20, seed: p.seed)
        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        let plainRoot = plain.path, driveRoot = drive.mountPoint
        for writer in 0..<4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                let run = StressRun(roots: ["\(plainRoot)/w\(writer)", "\(driveRoot)/w\(writer)"], parameters: p,
                                    seed: p.seed &+ UInt64(writer), operations: p.threadOperations, pool: pool)
                do { try run.run() } catch { failures.withLock { $0.append("writer \(writer): \(error)") } }
            }
        }
        group.wait()
        for f in failures.withLock({ $0 }) { Issue.record(Comment(rawValue: f)) }
        guard failures.withLock({ $0.isEmpty }) else { return }
        try expectSameTrees(plain.path, drive.mountPoint, seed: p.seed, when: "after four writers", skipping: ["Camera Roll", ".backup", "Backups"])
        try drive.unmount()
        try drive.start()
        try expectSameTrees(plain.path, drive.mountPoint, seed: p.seed, when: "after four writers and a remount", skipping: ["Camera Roll", ".backup", "Backups"])
    }

    func expectSameTrees(_ plainRoot: String, _ driveRoot: String, seed: UInt64, when: String, skipping: Set<String> = []) throws {
        let a = try treeSnapshot(plainRoot).filter { !skipping.contains(String($0.key.prefix { $0 != "/" })) }
        let b = try treeSnapshot(driveRoot).filter { !skipping.contains(String($0.key.prefix { $0 != "/" })) }
        let diff = treeDifferences(a, b)
        #expect(diff.isEmpty, Comment(rawValue: "seed \(seed), \(when): the trees differ:\n" + diff.joined(separator: "\n")))
        #expect(a.count > 0, "seed \(seed), \(when): the plain tree is empty")
    }
}
