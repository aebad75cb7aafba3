import Testing
import Foundation
import Storage
@testable import Drive

/// The generated read-only tree and attributes, through the file system's logic.
@Suite(.tags(.logic)) struct VirtualTreeTests {
    final class FakeTree: VirtualTree, @unchecked Sendable {
        let rootName = ".backup"
        let attributePrefix = "user.vdrive."
        var status = "Backing up 1 of 2"
        func entries(in path: String) -> [VirtualEntry]? {
            switch path {
            case "": return [VirtualEntry(name: "pending", isDirectory: true), VirtualEntry(name: "status", isDirectory: false)]
            case "pending": return [VirtualEntry(name: "IMG_1.jpg", isDirectory: false)]
            default: return nil
            }
        }
        func content(of path: String) -> [UInt8]? {
            switch path {
            case "status": return Array((status + "\n").utf8)
            case "pending/IMG_1.jpg": return Array("Camera Roll/IMG_1.jpg\n".utf8)
            default: return nil
            }
        }
        func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] {
            path.hasPrefix("Camera Roll/") ? ["user.vdrive.backup": Array("pending".utf8)] : [:]
        }
    }

    @Test func treeIsListedReadAndReadOnly() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        let tree = FakeTree()
        fs.virtualTree = tree
        let rootNames = try fs.readdir(1, after: 0, limit: 100).map { String(decoding: $0.name, as: UTF8.self) }
        #expect(rootNames == [".", "..", "Camera Roll", ".backup"])
        let backup = try fs.lookup(parent: 1, name: Array(".backup".utf8))
        #expect(backup.isDirectory)
        let status = try fs.lookup(parent: backup.ino, name: Array("status".utf8))
        let fh = try fs.open(status.ino, writable: false, truncate: false)
        tree.status = "changed after open"
        var buf = [UInt8](repeating: 0, count: 100)
        let n = try buf.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: 0) }
        #expect(String(decoding: buf[0..<n], as: UTF8.self) == "Backing up 1 of 2\n")
        fs.release(fh)
        #expect(throws: Errno(EROFS)) { _ = try fs.open(status.ino, writable: true, truncate: false) }
        #expect(throws: Errno(EROFS)) { _ = try fs.create(parent: backup.ino, name: Array("x".utf8), mode: 0o644, uid: 0, gid: 0) }
        #expect(throws: Errno.fileExists) { _ = try fs.create(parent: 1, name: Array(".backup".utf8), mode: 0o644, uid: 0, gid: 0) }
        #expect(throws: Errno.notPermitted) { try fs.rmdir(parent: 1, name: Array(".backup".utf8)) }
        let pending = try fs.lookup(parent: backup.ino, name: Array("pending".utf8))
        #expect(try fs.readdir(pending.ino, after: 0, limit: 100).map { String(decoding: $0.name, as: UTF8.self) } == [".", "..", "IMG_1.jpg"])
        #expect(throws: Errno.noSuchFileOrDirectory) { _ = try fs.lookup(parent: backup.ino, name: Array("nope".utf8)) }
    }

    @Test func generatedAttributesOnRealFiles() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        fs.virtualTree = FakeTree()
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let (a, fh) = try fs.createAndOpen(parent: roll.ino, name: Array("IMG_1.jpg".utf8), mode: 0o644, uid: 0, gid: 0)
        _ = try Array("jpeg".utf8).withUnsafeBytes { try fs.write(fh, $0, at: 0) }
        try fs.flush(fh); fs.release(fh)
        #expect(try fs.listxattr(a.ino) == ["user.vdrive.backup"])
        #expect(try fs.getxattr(a.ino, name: "user.vdrive.backup") == Array("pending".utf8))
        // Writes to generated attributes are accepted and ignored (cp -a, rsync -X).
        try fs.setxattr(a.ino, name: "user.vdrive.backup", value: [1], create: false, replace: false)
        try fs.removexattr(a.ino, name: "user.vdrive.backup")
        #expect(try fs.getxattr(a.ino, name: "user.vdrive.backup") == Array("pending".utf8))
        try fs.setxattr(a.ino, name: "user.mine", value: [1], create: false, replace: false)
        #expect(try fs.listxattr(a.ino) == ["user.mine", "user.vdrive.backup"])
    }
}
