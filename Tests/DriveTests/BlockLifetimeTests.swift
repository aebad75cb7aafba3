import Testing
import Backup
import Foundation
import Crypto
import Storage
@testable import Drive

/// A block file goes only when no row names its block at the moment it goes
/// (`Catalog.removeUnnamedBlockFiles`), without a kernel: content deleted and saved
/// again, shared by several files, evicted, across commits of the group and reopenings.
/// `BlockAudit` (what `vdrive check` and the after-crash check run) is the judge.
@Suite(.tags(.logic)) struct BlockLifetimeTests {
    /// Every boundary: one byte, the largest block kept in the catalog and one past it,
    /// a photo, a block less one, one block, one block and a byte, several blocks.
    static let sizes = [1, InlineBlocks.limit, InlineBlocks.limit + 1, 300_000, Blocks.size - 1, Blocks.size, Blocks.size + 1, 2 * Blocks.size + 7]
    static let folders = ["", CameraRollRules.folderName]

    /// A drive whose groups commit only when asked (a window of a minute stands for
    /// "not yet"): a delete and the next save share one group, as they do within 10 ms.
    static func open(_ dir: TemporaryDirectory) throws -> DriveFileSystem {
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        fs.startBackgroundWork(groupCommitWindow: 60)
        return fs
    }

    static func folder(_ fs: DriveFileSystem, _ name: String) throws -> UInt64 {
        if name.isEmpty { return Catalog.rootIno }
        let a = try fs.lookup(parent: Catalog.rootIno, name: Array(name.utf8))
        fs.forget(a.ino, count: 1)
        return a.ino
    }

    /// Saves `bytes` under `name` as `cp` does (created, or truncated and rewritten), then
    /// drops the kernel's reference as the kernel does once the file is closed.
    static func save(_ fs: DriveFileSystem, _ parent: UInt64, _ name: String, _ bytes: [UInt8]) throws {
        let ino: UInt64, fh: UInt64
        if let a = try? fs.lookup(parent: parent, name: Array(name.utf8)) {
            (ino, fh) = (a.ino, try fs.open(a.ino, writable: true, truncate: true))
        } else {
            let (a, h) = try fs.createAndOpen(parent: parent, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
            (ino, fh) = (a.ino, h)
        }
        var offset = 0
        while offset < bytes.count {
            let end = min(bytes.count, offset + (1 << 20))
            _ = try bytes[offset..<end].withUnsafeBytes { try fs.write(fh, $0, at: Int64(offset)) }
            offset = end
        }
        try fs.flush(fh)
        fs.release(fh)
        fs.forget(ino, count: 1)
    }

    static func read(_ fs: DriveFileSystem, _ parent: UInt64, _ name: String) throws -> [UInt8] {
        let a = try fs.lookup(parent: parent, name: Array(name.utf8))
        defer { fs.forget(a.ino, count: 1) }
        let fh = try fs.open(a.ino, writable: false, truncate: false)
        defer { fs.release(fh) }
        var out = [UInt8](repeating: 0, count: Int(a.size))
        var offset = 0
        while offset < out.count {
            let end = min(out.count, offset + (1 << 20))
            let n = try out[offset..<end].withUnsafeMutableBytes { try fs.read(fh, into: $0, at: Int64(offset)) }
            if n == 0 { break }
            offset += n
        }
        return Array(out[0..<offset])
    }

    static func remove(_ fs: DriveFileSystem, _ parent: UInt64, _ name: String) throws {
        try fs.unlink(parent: parent, name: Array(name.utf8))
    }

    /// The store as `vdrive check` sees it, read under the catalog's lock so that no
    /// commit or removal runs halfway through.
    static func check(_ fs: DriveFileSystem) throws -> BlockAudit.Report {
        try fs.catalog.withDatabaseUnchecked { try BlockAudit.run($0.db, blobs: fs.blobs, pack: $0.pack) }
    }

    static func describe(_ r: BlockAudit.Report) -> String {
        r.findings.map { "\($0.problem.rawValue) \($0.digest.hex.prefix(12))" }.joined(separator: ", ")
    }

    @Test(arguments: sizes, folders)
    func contentDeletedAndSavedAgainInOneGroupKeepsItsBlocks(size: Int, folder: String) throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let bytes = pseudoRandomBytes(size, seed: UInt64(size))
        var fs = try Self.open(dir)
        let parent = try Self.folder(fs, folder)
        try Self.save(fs, parent, "f", bytes)
        try Self.remove(fs, parent, "f")
        try Self.save(fs, parent, "f", bytes)
        #expect(try Self.read(fs, parent, "f") == bytes)
        try fs.syncAll()   // the group commits: the delete's removals run now
        var report = try Self.check(fs)
        #expect(report.isSound, "after the group's commit: \(Self.describe(report))")
        #expect(try Self.read(fs, parent, "f") == bytes)

        // Shared by a second file, the first deleted and saved again after a commit.
        try Self.save(fs, parent, "g", bytes)
        try Self.remove(fs, parent, "f")
        try fs.syncAll()
        try Self.save(fs, parent, "f", bytes)
        try Self.remove(fs, parent, "g")
        fs.shutdown()

        fs = try Self.open(dir)
        defer { fs.shutdown() }
        #expect(try Self.read(fs, parent, "f") == bytes)
        report = try Self.check(fs)
        #expect(report.isSound, "after reopening: \(Self.describe(report))")
        #expect(report.unnamedFiles.isEmpty, "block files nothing names were kept: \(report.unnamedFiles.count)")

        // Deleted for good: nothing is kept.
        try Self.remove(fs, parent, "f")
        try fs.syncAll()
        report = try Self.check(fs)
        #expect(report.isSound && report.unnamedFiles.isEmpty)
        #expect(report.checked == 0, "a block no file names is gone: \(report.checked) left")
    }

    /// A block marked damaged whose last file went, then saved again before the group
    /// committed: the new bytes replace the damaged file (it is never trusted again).
    @Test func aDamagedBlockSavedAgainIsReplacedNotTrusted() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let bytes = pseudoRandomBytes(300_000, seed: 77)
        let digest = SHA256Hasher.digest(bytes)
        let fs = try Self.open(dir)
        defer { fs.shutdown() }
        try Self.save(fs, 1, "f", bytes)
        let path = fs.blobs.path(for: digest)
        chmod(path, 0o600)
        var wrong = bytes
        wrong[1000] ^= 0xff
        try writeFile(path, wrong, flags: O_WRONLY)
        try fs.catalog.markDamaged(digest)
        try Self.remove(fs, 1, "f")
        try Self.save(fs, 1, "f", bytes)
        try fs.syncAll()
        #expect(fs.blobs.verify(digest), "the damaged file was kept under a new, sound row")
        #expect(try Self.check(fs).isSound)
        #expect(try Self.read(fs, 1, "f") == bytes)
    }

    /// The cache bound chose a block, then a file saved the same bytes before the bound
    /// got to it: the block stays (the file has no other copy).
    @Test func anEvictionChosenBeforeASaveOfTheSameBytesLeavesTheBlock() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let bytes = pseudoRandomBytes(Blocks.size, seed: 5)
        let digest = SHA256Hasher.digest(bytes)
        let fs = try Self.open(dir)
        defer { fs.shutdown() }
        let roll = try Self.folder(fs, CameraRollRules.folderName)
        try Self.save(fs, roll, "IMG_1.jpg", bytes)
        let original = try fs.lookup(parent: roll, name: Array("IMG_1.jpg".utf8)).ino
        fs.forget(original, count: 1)
        try Self.save(fs, 1, "copy.jpg", bytes)   // saved between the choice and the eviction
        #expect(try !fs.catalog.evict(digest, onlyNamedBy: [original]), "evicted a block another file names")
        #expect(fs.blobs.verify(digest))
        try Self.remove(fs, 1, "copy.jpg")
        #expect(try fs.catalog.evict(digest, onlyNamedBy: [original]))
        #expect(!fs.blobs.contains(digest))
        #expect(try Self.check(fs).isSound)
    }
}
