import Testing
import Backup
import Foundation
import Crypto
import Storage
@testable import Drive

/// Block lifetime against a model, without a kernel: seeded random steps over a few
/// files that share a small pool of contents (so blocks are deduplicated), with deletes,
/// saves of the same bytes again, truncates, renames over, evictions (the server holds
/// every block: a `FakeRemote`), commits of the group and reopenings. After each step
/// every row's block is here and sound (`BlockAudit`) and every file reads as the model
/// says; after each garbage pass no block file is kept that no row names.
/// `VDRIVE_LIFETIME_SEED` replays a run; `VDRIVE_LIFETIME_STEPS` makes it longer.
@Suite(.tags(.logic)) struct BlockLifetimeModelTests {
    typealias L = BlockLifetimeTests

    /// Contents on every block boundary; two share their first block (dedup across
    /// files of different lengths), one is all zeros but a byte (holes).
    static func pool(seed: UInt64) -> [[UInt8]] {
        let big = pseudoRandomBytes(Blocks.size + 5_000, seed: seed)
        var sparse = [UInt8](repeating: 0, count: Blocks.size + 10)
        sparse[Blocks.size + 3] = 9
        return [
            pseudoRandomBytes(1_000, seed: seed &+ 1),
            pseudoRandomBytes(InlineBlocks.limit, seed: seed &+ 2),
            pseudoRandomBytes(300_000, seed: seed &+ 3),
            Array(big[0..<Blocks.size]),
            big,
            sparse,
        ]
    }

    @Test func randomStepsKeepEveryNamedBlockAndNoUnnamedFile() throws {
        let env = ProcessInfo.processInfo.environment
        let seed = env["VDRIVE_LIFETIME_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let steps = env["VDRIVE_LIFETIME_STEPS"].flatMap(Int.init) ?? 150
        print("BlockLifetimeModelTests seed \(seed) (VDRIVE_LIFETIME_SEED=\(seed) replays it), \(steps) steps")
        var rng = SeededGenerator(seed: seed)
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let contents = Self.pool(seed: seed)
        let remote = FakeRemote()
        for c in contents {
            for i in 0..<Blocks.count(forSize: Int64(c.count)) {
                _ = remote.add(Array(c[(i * Blocks.size)..<min(c.count, (i + 1) * Blocks.size)]))
            }
        }
        var fs = try L.open(dir)
        fs.blockCache.remote = remote
        defer { fs.shutdown() }
        let roll = try L.folder(fs, CameraRollRules.folderName)
        let names = ["a", "b", "c", "d"]
        let folders: [(ino: UInt64, label: String)] = [(Catalog.rootIno, ""), (roll, "Camera Roll/")]
        /// (folder index, name) → the file's bytes.
        var model: [String: (folder: Int, name: String, bytes: [UInt8])] = [:]
        func key(_ f: Int, _ n: String) -> String { folders[f].label + n }

        for step in 0..<steps {
          var did = "?"
          do {
            let f = Int.random(in: 0..<2, using: &rng)
            let name = names.randomElement(using: &rng)!
            let k = key(f, name)
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<30:
                let bytes = contents.randomElement(using: &rng)!
                try L.save(fs, folders[f].ino, name, bytes)
                model[k] = (f, name, bytes)
                did = "save \(k) (\(bytes.count) bytes)"
            case 30..<45:
                guard let existing = model[k] else { continue }
                // Deleted and saved again with the same bytes, as an importer does.
                try L.remove(fs, folders[f].ino, name)
                try L.save(fs, folders[f].ino, name, existing.bytes)
                did = "delete and save again \(k)"
            case 45..<60:
                guard model[k] != nil else { continue }
                try L.remove(fs, folders[f].ino, name)
                model[k] = nil
                did = "delete \(k)"
            case 60..<68:
                guard let existing = model[k] else { continue }
                let cuts = [0, 1, InlineBlocks.limit, Blocks.size, existing.bytes.count / 2].filter { $0 <= existing.bytes.count }
                let size = cuts.randomElement(using: &rng)!
                var change = AttributeChanges()
                change.size = Int64(size)
                let a = try fs.lookup(parent: folders[f].ino, name: Array(name.utf8))
                _ = try fs.setattr(a.ino, change, handle: nil)
                fs.forget(a.ino, count: 1)
                model[k] = (f, name, Array(existing.bytes[0..<size]))
                did = "truncate \(k) to \(size)"
            case 68..<78:
                guard let source = model.values.filter({ $0.folder == f && $0.name != name }).randomElement(using: &rng) else { continue }
                try fs.rename(parent: folders[f].ino, name: Array(source.name.utf8), newParent: folders[f].ino, newName: Array(name.utf8), flags: 0)
                model[key(f, source.name)] = nil
                model[k] = (f, name, source.bytes)
                did = "rename \(key(f, source.name)) over \(k)"
            case 78..<88:
                guard model[k] != nil else { continue }
                // Online only if only this file names the block and the server holds it
                // (optimize storage's rule; a truncate's new last block is not on the server).
                let a = try fs.lookup(parent: folders[f].ino, name: Array(name.utf8))
                fs.forget(a.ino, count: 1)
                var evicted = 0
                for d in try fs.catalog.storedBlocks(a.ino).values where remote.state.withLock({ $0.blocks[d] != nil }) {
                    if try fs.catalog.evict(d, onlyNamedBy: [a.ino]) { evicted += 1 }
                }
                did = "evict \(k) (\(evicted) block(s))"
            case 88..<94:
                try fs.syncAll()
                fs.collectGarbage()
                let report = try L.check(fs)
                #expect(report.unnamedFiles.isEmpty, "seed \(seed) step \(step): after a garbage pass, \(report.unnamedFiles.count) block file(s) no row names")
                did = "garbage pass"
            default:
                fs.shutdown()
                fs = try L.open(dir)
                fs.blockCache.remote = remote
                did = "reopen"
            }
            let report = try L.check(fs)
            #expect(report.isSound, "seed \(seed) step \(step) (\(did)): \(L.describe(report))")
            if let file = model[k] {
                #expect(try L.read(fs, folders[file.folder].ino, file.name) == file.bytes, "seed \(seed) step \(step) (\(did)): \(k) reads wrong")
            }
            if !report.isSound { return }
          } catch {
            Issue.record("seed \(seed) step \(step) (\(did)): \(error)")
            return
          }
        }
        // Every file as the model says, after one last reopening.
        fs.shutdown()
        fs = try L.open(dir)
        fs.blockCache.remote = remote
        for file in model.values {
            #expect(try L.read(fs, folders[file.folder].ino, file.name) == file.bytes, "seed \(seed): \(key(file.folder, file.name)) at the end")
        }
        try fs.syncAll()
        let report = try L.check(fs)
        #expect(report.isSound && report.unnamedFiles.isEmpty, "seed \(seed) at the end: \(L.describe(report)), \(report.unnamedFiles.count) unnamed")
    }
}
