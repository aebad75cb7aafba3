import Foundation
import Crypto
import Storage

/// A read-only tree of generated files shown at the workspace root (the backup
/// engine's `.backup/` folder), plus generated `user.vdrive.*` attributes on real
/// files. The drive asks; the provider answers from its own state. The drive knows
/// nothing of what the files mean.
public protocol VirtualTree: AnyObject, Sendable {
    /// The root folder's name at the workspace root, e.g. ".backup".
    var rootName: String { get }
    /// The entries of a folder ("" is the tree's root, "pending" a sub-folder), or nil
    /// when `path` is not a folder of the tree.
    func entries(in path: String) -> [VirtualEntry]?
    /// The bytes of a file of the tree, or nil when `path` is not a file of it.
    func content(of path: String) -> [UInt8]?
    /// Generated extended attributes of a real file (name → value), by workspace path.
    func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]]
    /// The prefix of the generated attribute names, which users cannot set or remove.
    var attributePrefix: String { get }
}

public struct VirtualEntry: Sendable, Equatable {
    public let name: String
    public let isDirectory: Bool
    public init(name: String, isDirectory: Bool) { self.name = name; self.isDirectory = isDirectory }
}

/// Inode numbers for virtual paths: a range the catalog never reaches, assigned on
/// first sight and stable for the life of the process.
/// `@unchecked Sendable`: the tables are guarded by `lock`.
final class VirtualInodes: @unchecked Sendable {
    static let base: UInt64 = 1 << 56
    private let lock = NSLock()
    private var byPath: [String: UInt64] = [:]
    private var byIno: [UInt64: String] = [:]

    static func contains(_ ino: UInt64) -> Bool { ino >= base }

    func ino(for path: String) -> UInt64 {
        lock.withLock {
            if let i = byPath[path] { return i }
            let i = Self.base + UInt64(byPath.count)
            byPath[path] = i
            byIno[i] = path
            return i
        }
    }

    func path(of ino: UInt64) -> String? { lock.withLock { byIno[ino] } }
}

extension DriveFileSystem {
    /// Attributes of a virtual path: folders r-x, files r--, owned by the mount's user.
    func virtualAttributes(_ path: String, tree: VirtualTree) throws -> NodeAttributes {
        let ino = virtualInodes.ino(for: path)
        let now = nowNanoseconds()
        if let entries = tree.entries(in: path) {
            return NodeAttributes(ino: ino, mode: UInt32(S_IFDIR) | 0o555, uid: getuid(), gid: getgid(), size: 0,
                                  nlink: UInt32(2 + entries.filter(\.isDirectory).count), atime: now, mtime: now, ctime: now, rdev: 0, content: nil, stored: 0)
        }
        if let content = tree.content(of: path) {
            return NodeAttributes(ino: ino, mode: UInt32(S_IFREG) | 0o444, uid: getuid(), gid: getgid(), size: Int64(content.count),
                                  nlink: 1, atime: now, mtime: now, ctime: now, rdev: 0, content: nil, stored: 0)
        }
        throw Errno.noSuchFileOrDirectory
    }

    func virtualChildPath(parent: UInt64, name: [UInt8]) -> String? {
        guard let tree = virtualTree else { return nil }
        if parent == Catalog.rootIno && name == Array(tree.rootName.utf8) { return "" }
        guard VirtualInodes.contains(parent), let base = virtualInodes.path(of: parent) else { return nil }
        let n = String(decoding: name, as: UTF8.self)
        return base.isEmpty ? n : base + "/" + n
    }

    /// Throws EROFS when a change would touch the virtual tree, EEXIST/EPERM for its name at the root.
    func refuseVirtual(parent: UInt64, name: [UInt8]) throws {
        if VirtualInodes.contains(parent) { throw Errno(EROFS) }
        if let tree = virtualTree, parent == Catalog.rootIno, name == Array(tree.rootName.utf8) { throw Errno.fileExists }
    }

    func refuseVirtual(_ ino: UInt64) throws {
        if VirtualInodes.contains(ino) { throw Errno(EROFS) }
    }

    func virtualReaddir(_ ino: UInt64, after offset: Int64) throws -> [DirectoryEntryInfo] {
        guard let tree = virtualTree, let path = virtualInodes.path(of: ino) else { throw Errno.noSuchFileOrDirectory }
        guard let entries = tree.entries(in: path) else { throw Errno.notDirectory }
        var out: [DirectoryEntryInfo] = []
        let me = try virtualAttributes(path, tree: tree)
        if offset < 1 { out.append(DirectoryEntryInfo(offset: 1, name: Array(".".utf8), attributes: me)) }
        if offset < 2 { out.append(DirectoryEntryInfo(offset: 2, name: Array("..".utf8), attributes: me)) }
        // Generated listings have no ids: the offset is the position in the sorted list.
        let sorted = entries.sorted { $0.name < $1.name }
        for (i, e) in sorted.enumerated() where Int64(i) + 3 > offset {
            let child = path.isEmpty ? e.name : path + "/" + e.name
            guard let a = try? virtualAttributes(child, tree: tree) else { continue }
            out.append(DirectoryEntryInfo(offset: Int64(i) + 3, name: Array(e.name.utf8), attributes: a))
        }
        return out
    }
}
