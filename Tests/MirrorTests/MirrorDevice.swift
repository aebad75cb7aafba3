import Foundation
import Crypto
import Storage
import TestSupport
@testable import Drive
@testable import WorkspaceMirror

/// One device of the logic tier: a drive called directly (no kernel) with its mirror on a
/// shared server. `sync()` runs the mirror's passes until it has nothing to do.
final class MirrorDevice {
    let name: String
    let dir: TemporaryDirectory
    private(set) var fs: DriveFileSystem
    private(set) var engine: MirrorEngine
    let server: MirrorServer

    /// `groupCommitWindow`: the drive groups its commits as a mount does (else each change
    /// commits on its own).
    init(_ name: String, server: MirrorServer, settings: MirrorSettings = MirrorSettings(), groupCommitWindow: Double? = nil) throws {
        self.name = name
        self.server = server
        dir = TemporaryDirectory("vdrive-mirror-\(name)")
        (fs, engine) = try Self.open(dir.path, name, server, settings)
        if let groupCommitWindow { fs.startBackgroundWork(groupCommitWindow: groupCommitWindow) }
    }

    private static func open(_ path: String, _ name: String, _ server: MirrorServer, _ settings: MirrorSettings) throws -> (DriveFileSystem, MirrorEngine) {
        let fs = try DriveFileSystem(statePath: path + "/state", extraMigrations: MirrorSchema.migrations,
                                     rootFolders: [MirrorRules.cameraRoll])
        _ = try fs.recover()
        return (fs, try MirrorEngine(drive: fs, server: server, device: { name }, settings: settings))
    }

    /// Closes the drive and opens it again from its state (a restart).
    func reopen() throws {
        fs.shutdown()
        (fs, engine) = try Self.open(dir.path, name, server, MirrorSettings())
    }

    func sync() throws { try engine.runOnce() }

    /// One pass up and nothing else: what this device sends before the feed has told it of
    /// the others' changes (the race of two devices acting at once).
    func sendBeforeHearing() throws { _ = try engine.sendLocal(force: true) }

    func remove() { fs.shutdown(); dir.remove() }

    // MARK: Changes as the kernel would make them

    func ino(_ path: String) throws -> UInt64 {
        var ino: UInt64 = 1
        for part in path.split(separator: "/") { ino = try fs.lookup(parent: ino, name: Array(part.utf8)).ino }
        return ino
    }

    private func split(_ path: String) throws -> (UInt64, [UInt8]) {
        let parts = path.split(separator: "/")
        let parent = try ino(parts.dropLast().joined(separator: "/"))
        return (parent, Array(parts.last!.utf8))
    }

    func mkdir(_ path: String) throws {
        let (parent, name) = try split(path)
        _ = try fs.create(parent: parent, name: name, mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
    }

    func write(_ path: String, _ bytes: [UInt8]) throws {
        let (parent, name) = try split(path)
        let fh: UInt64
        if let existing = try? fs.lookup(parent: parent, name: name) {
            fh = try fs.open(existing.ino, writable: true, truncate: true)
        } else {
            fh = try fs.createAndOpen(parent: parent, name: name, mode: 0o644, uid: 0, gid: 0).1
        }
        if !bytes.isEmpty { _ = try bytes.withUnsafeBytes { try fs.write(fh, $0, at: 0) } }
        try fs.flush(fh)
        fs.release(fh)
    }

    func write(_ path: String, _ text: String) throws { try write(path, Array(text.utf8)) }

    func rename(_ from: String, _ to: String) throws {
        let (p1, n1) = try split(from)
        let (p2, n2) = try split(to)
        try fs.rename(parent: p1, name: n1, newParent: p2, newName: n2, flags: 0)
    }

    func unlink(_ path: String) throws {
        let (p, n) = try split(path)
        try fs.unlink(parent: p, name: n)
    }

    func rmdir(_ path: String) throws {
        let (p, n) = try split(path)
        try fs.rmdir(parent: p, name: n)
    }

    func chmod(_ path: String, _ mode: UInt32) throws {
        var c = AttributeChanges()
        c.mode = mode
        _ = try fs.setattr(try ino(path), c, handle: nil)
    }

    func symlink(_ path: String, to target: String) throws {
        let (p, n) = try split(path)
        _ = try fs.symlink(parent: p, name: n, target: Array(target.utf8), uid: 0, gid: 0)
    }

    /// Every name outside the Camera Roll: path → kind, content hash (files), size, executable, target.
    func tree() throws -> [String: String] {
        var out: [String: String] = [:]
        func walk(_ folder: UInt64, _ prefix: String) throws {
            for e in try fs.committedEntries(in: folder) {
                let name = String(decoding: e.name, as: UTF8.self)
                if folder == 1 && name == "Camera Roll" { continue }
                let path = prefix.isEmpty ? name : prefix + "/" + name
                switch e.kind {
                case .folder:
                    out[path] = "folder"
                    try walk(e.ino, path)
                case .file:
                    out[path] = "file \(e.content?.hex ?? MirrorEngine.emptyContent) \(e.size) x\(e.permissions & 0o100 != 0)"
                case .symlink:
                    out[path] = "symlink \(String(decoding: e.target ?? [], as: UTF8.self))"
                case .special:
                    out[path] = "special"
                }
            }
        }
        try walk(1, "")
        return out
    }
}

func contentHash(_ text: String) -> String { ContentHash.of(bytes: Array(text.utf8)).hex }
