import Testing
import Foundation
import Storage
@testable import Drive

/// The catalog keeps recently read inode rows in memory and answers `security.*`
/// attribute lookups from a set of the inodes that have one. Both must stay exact:
/// after every kind of change, what the file system answers equals the row on disk,
/// read through a connection of its own.
@Suite(.tags(.logic)) struct CatalogCacheTests {
    let logic = FileSystemLogicTests()

    /// The inode row as stored, read by another connection.
    func storedRow(_ fs: DriveFileSystem, _ ino: UInt64) throws -> [Int64]? {
        let db = try Database(path: fs.catalogPath)
        return try db.queryOne("SELECT mode, uid, gid, size, nlink, atime_ns, mtime_ns, ctime_ns FROM inodes WHERE ino = ?", ino) { r in
            (0..<8).map { r.int64(Int32($0)) }
        }
    }

    func answered(_ fs: DriveFileSystem, _ ino: UInt64) throws -> [Int64] {
        let a = try fs.getattr(ino)
        return [Int64(a.mode), Int64(a.uid), Int64(a.gid), a.size, Int64(a.nlink), a.atime, a.mtime, a.ctime]
    }

    func expectSame(_ fs: DriveFileSystem, _ inodes: [UInt64], _ step: String) throws {
        for ino in inodes {
            let stored = try storedRow(fs, ino)
            if let stored {
                #expect(try answered(fs, ino) == stored, "inode \(ino) after \(step)")
            } else {
                #expect(throws: Errno.noSuchFileOrDirectory) { _ = try fs.getattr(ino) }
            }
        }
    }

    @Test func everyChangeOfAnInodeIsSeenByTheNextGetattr() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try logic.makeFS(dir)
        defer { fs.shutdown() }
        let folder = try fs.create(parent: 1, name: Array("folder".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        let (file, fh) = try fs.createAndOpen(parent: folder.ino, name: Array("a.txt".utf8), mode: 0o644, uid: 0, gid: 0)
        let all = [1, folder.ino, file.ino]
        // Read everything once, so the cache holds every row before each change.
        func warm() throws { for ino in all { _ = try? fs.getattr(ino) } }

        try warm()
        try logic.write(fs, fh, Array("hello".utf8), at: 0)
        try fs.flush(fh)
        try expectSame(fs, all, "a write and its commit")

        try warm()
        var chmod = AttributeChanges(); chmod.mode = 0o600
        _ = try fs.setattr(file.ino, chmod, handle: nil)
        try expectSame(fs, all, "chmod")

        try warm()
        var chown = AttributeChanges(); chown.uid = 1000; chown.gid = 1000
        _ = try fs.setattr(file.ino, chown, handle: nil)
        try expectSame(fs, all, "chown")

        try warm()
        var times = AttributeChanges(); times.atime = 1_000_000_000; times.mtime = 2_000_000_000
        _ = try fs.setattr(file.ino, times, handle: nil)
        try expectSame(fs, all, "utimens")
        fs.release(fh)

        try warm()
        _ = try fs.link(file.ino, newParent: 1, newName: Array("hard".utf8))
        try expectSame(fs, all, "link")

        try warm()
        try fs.rename(parent: 1, name: Array("hard".utf8), newParent: folder.ino, newName: Array("b.txt".utf8), flags: 0)
        try expectSame(fs, all, "rename")

        try warm()
        var shorter = AttributeChanges(); shorter.size = 2
        _ = try fs.setattr(file.ino, shorter, handle: nil)
        try expectSame(fs, all, "truncate")

        try warm()
        try fs.setxattr(file.ino, name: "user.note", value: Array("x".utf8), create: false, replace: false)
        try expectSame(fs, all, "setxattr")

        try warm()
        #expect(throws: Errno.fileExists) {
            _ = try fs.create(parent: folder.ino, name: Array("a.txt".utf8), mode: UInt32(S_IFREG) | 0o644, uid: 0, gid: 0)
        }
        try expectSame(fs, all, "a create refused (rolled back)")

        try warm()
        try fs.unlink(parent: folder.ino, name: Array("a.txt".utf8))
        try fs.unlink(parent: folder.ino, name: Array("b.txt".utf8))
        try expectSame(fs, all, "unlink of both names")
    }

    @Test func securityAttributesAreFoundAfterARestartAndAbsentOnesCostNoRow() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        var fs = try logic.makeFS(dir)
        let (with, h1) = try fs.createAndOpen(parent: 1, name: Array("with".utf8), mode: 0o755, uid: 0, gid: 0)
        let (without, h2) = try fs.createAndOpen(parent: 1, name: Array("without".utf8), mode: 0o755, uid: 0, gid: 0)
        fs.release(h1); fs.release(h2)
        #expect(throws: Errno.noData) { _ = try fs.getxattr(with.ino, name: "security.capability") }
        try fs.setxattr(with.ino, name: "security.capability", value: [1, 2, 3], create: false, replace: false)
        #expect(try fs.getxattr(with.ino, name: "security.capability") == [1, 2, 3])
        #expect(throws: Errno.noData) { _ = try fs.getxattr(without.ino, name: "security.capability") }
        fs.shutdown()

        fs = try logic.makeFS(dir)
        defer { fs.shutdown() }
        #expect(try fs.getxattr(with.ino, name: "security.capability") == [1, 2, 3])
        #expect(throws: Errno.noData) { _ = try fs.getxattr(without.ino, name: "security.capability") }
        try fs.removexattr(with.ino, name: "security.capability")
        #expect(throws: Errno.noData) { _ = try fs.getxattr(with.ino, name: "security.capability") }
        try fs.setxattr(without.ino, name: "security.selinux", value: [9], create: true, replace: false)
        #expect(try fs.getxattr(without.ino, name: "security.selinux") == [9])
    }
}
