import Foundation
import Crypto
import Storage

/// A read-only tree of generated files shown at the workspace root (the backup
/// engine's `.backup/` folder, the `Backups/` tree of every device's backups), plus
/// generated `user.vdrive.*` attributes on real files. The drive asks; the provider
/// answers from its own state. The drive knows nothing of what the files mean.
public protocol VirtualTree: AnyObject, Sendable {
    /// The root folder's name at the workspace root, e.g. ".backup".
    var rootName: String { get }
    /// The entries of a folder ("" is the tree's root, "pending" a sub-folder), or nil
    /// when `path` is not a folder of the tree.
    func entries(in path: String) -> [VirtualEntry]?
    /// The bytes of a file of the tree, or nil when `path` is not a file of it.
    func content(of path: String) -> [UInt8]?
    /// What `path` is: a folder, a generated file, or a file backed up on the server.
    /// The default answers from `entries(in:)` and `content(of:)`.
    func node(at path: String) -> VirtualNode?
    /// Generated extended attributes of a real file (name → value), by workspace path.
    func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]]
    /// The prefix of the generated attribute names, which users cannot set or remove.
    var attributePrefix: String { get }
}

extension VirtualTree {
    public func node(at path: String) -> VirtualNode? {
        if entries(in: path) != nil { return .directory(mtime: nil) }
        if let content = content(of: path) { return .generated(content) }
        return nil
    }
}

public struct VirtualEntry: Sendable, Equatable {
    public let name: String
    public let isDirectory: Bool
    public init(name: String, isDirectory: Bool) { self.name = name; self.isDirectory = isDirectory }
}

/// One path of a virtual tree.
public enum VirtualNode: Sendable, Equatable {
    /// A folder; `mtime` in Unix seconds (nil: now).
    case directory(mtime: Int64?)
    /// A small generated file, its whole content (a snapshot is taken at open).
    case generated([UInt8])
    /// A file whose bytes are a content the workspace server holds, read on demand.
    case remote(RemoteFile)
}

/// A backed-up content shown as a file: its size and date come from the record, so
/// `ls -l` costs no transfer.
public struct RemoteFile: Sendable, Equatable, Hashable {
    public let content: SHA256Digest
    public let size: Int64
    /// Unix seconds: the capture date, else the file's modification time.
    public let mtime: Int64
    public init(content: SHA256Digest, size: Int64, mtime: Int64) { self.content = content; self.size = size; self.mtime = mtime }
}

/// Inode numbers for virtual paths (`.backup/status`, `Backups/phone/2019`, keyed by
/// the path from the workspace root, and for a remote file its content after a NUL): a
/// range the catalog never reaches, assigned on first sight and stable for the life of
/// the process.
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

/// A path inside one of the virtual trees.
struct VirtualPath {
    let tree: VirtualTree
    /// The path inside the tree ("" for its root).
    let path: String
    /// The path from the workspace root, the key of its inode number.
    var full: String { path.isEmpty ? tree.rootName : tree.rootName + "/" + path }

    func child(_ name: String) -> VirtualPath { VirtualPath(tree: tree, path: path.isEmpty ? name : path + "/" + name) }
}

extension DriveFileSystem {
    /// True when the workspace root holds a real entry called `name` (a virtual tree
    /// given that name would hide it). Counts no kernel lookup.
    public func rootHasEntry(named name: String) -> Bool {
        (try? catalog.lookup(parent: Catalog.rootIno, name: Array(name.utf8))) != nil
    }

    /// The tree and inner path of a virtual inode, nil for a catalog inode.
    func virtualPath(of ino: UInt64) -> VirtualPath? {
        guard VirtualInodes.contains(ino), let key = virtualInodes.path(of: ino) else { return nil }
        let full = key.split(separator: "\u{0}", maxSplits: 1).first.map(String.init) ?? key
        let root = full.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let tree = virtualTrees.first(where: { $0.rootName == root[0] }) else { return nil }
        return VirtualPath(tree: tree, path: root.count > 1 ? String(root[1]) : "")
    }

    /// Attributes of a virtual path: folders r-x, files r--, owned by the mount's user.
    func virtualAttributes(_ v: VirtualPath) throws -> NodeAttributes {
        guard let node = v.tree.node(at: v.path) else { throw Errno.noSuchFileOrDirectory }
        // A remote file's inode is its path and content: a new version at the same path
        // is a new inode to the kernel, so pages cached from the old one (still open
        // somewhere) are never served as the new one's.
        var key = v.full
        if case .remote(let file) = node { key += "\u{0}" + file.content.hex }
        let ino = virtualInodes.ino(for: key)
        let now = nowNanoseconds()
        switch node {
        case .directory(let mtime):
            let subfolders = (v.tree.entries(in: v.path) ?? []).filter(\.isDirectory).count
            let t = mtime.map { $0 * 1_000_000_000 } ?? now
            return NodeAttributes(ino: ino, mode: UInt32(S_IFDIR) | 0o555, uid: getuid(), gid: getgid(), size: 0,
                                  nlink: UInt32(2 + subfolders), atime: t, mtime: t, ctime: t, rdev: 0, content: nil, stored: 0)
        case .generated(let content):
            return NodeAttributes(ino: ino, mode: UInt32(S_IFREG) | 0o444, uid: getuid(), gid: getgid(), size: Int64(content.count),
                                  nlink: 1, atime: now, mtime: now, ctime: now, rdev: 0, content: nil, stored: 0)
        case .remote(let file):
            let t = file.mtime * 1_000_000_000
            // st_blocks counts what is on this disk: nothing until a read fetches it.
            return NodeAttributes(ino: ino, mode: UInt32(S_IFREG) | 0o444, uid: getuid(), gid: getgid(), size: file.size,
                                  nlink: 1, atime: t, mtime: t, ctime: t, rdev: 0, content: file.content, stored: 0)
        }
    }

    func virtualChildPath(parent: UInt64, name: [UInt8]) -> VirtualPath? {
        if parent == Catalog.rootIno {
            return virtualTrees.first { Array($0.rootName.utf8) == name }.map { VirtualPath(tree: $0, path: "") }
        }
        guard let base = virtualPath(of: parent) else { return nil }
        return base.child(String(decoding: name, as: UTF8.self))
    }

    /// Throws EROFS when a change would touch a virtual tree, EEXIST for a tree's name at the root.
    func refuseVirtual(parent: UInt64, name: [UInt8]) throws {
        if VirtualInodes.contains(parent) { throw Errno(EROFS) }
        if parent == Catalog.rootIno, virtualTrees.contains(where: { Array($0.rootName.utf8) == name }) { throw Errno.fileExists }
    }

    /// Unlink, rmdir and rename: EROFS inside a tree (read-only, like a read-only
    /// mount), EPERM for a tree's own folder at the root (the workspace is writable,
    /// that one name is not).
    func refuseVirtualRemoval(parent: UInt64, name: [UInt8]) throws {
        if VirtualInodes.contains(parent) { throw Errno(EROFS) }
        if virtualChildPath(parent: parent, name: name) != nil { throw Errno.notPermitted }
    }

    func refuseVirtual(_ ino: UInt64) throws {
        if VirtualInodes.contains(ino) { throw Errno(EROFS) }
    }

    /// At most `limit` entries after `offset`: a reply buffer's worth. A `Backups/` month
    /// can hold tens of thousands of files, and each entry's attributes give it an inode
    /// number and its strings (a listing that made them all for every page held 22 MB
    /// at once with 100,000 files in one folder, heaptrack).
    func virtualReaddir(_ ino: UInt64, after offset: Int64, limit: Int) throws -> [DirectoryEntryInfo] {
        guard let v = virtualPath(of: ino) else { throw Errno.noSuchFileOrDirectory }
        guard let entries = v.tree.entries(in: v.path) else { throw Errno.notDirectory }
        var out: [DirectoryEntryInfo] = []
        let me = try virtualAttributes(v)
        if offset < 1 { out.append(DirectoryEntryInfo(offset: 1, name: Array(".".utf8), attributes: me)) }
        if offset < 2 { out.append(DirectoryEntryInfo(offset: 2, name: Array("..".utf8), attributes: me)) }
        // Generated listings have no ids: the offset is the position in the sorted list.
        let sorted = entries.sorted { $0.name < $1.name }
        for (i, e) in sorted.enumerated().dropFirst(max(0, Int(offset) - 2)) {
            guard out.count < limit else { break }
            guard let a = try? virtualAttributes(v.child(e.name)) else { continue }
            out.append(DirectoryEntryInfo(offset: Int64(i) + 3, name: Array(e.name.utf8), attributes: a))
        }
        return Array(out.prefix(limit))   // "." and ".." count too
    }

    /// The virtual trees' folders in the root listing, after every catalog entry: each
    /// at its own offset from `virtualRootOffset` on.
    func virtualRootEntries(after offset: Int64) throws -> [DirectoryEntryInfo] {
        try virtualTrees.enumerated().compactMap { i, tree in
            let at = Self.virtualRootOffset + Int64(i) + 1   // the offset to go on after it
            guard at > offset else { return nil }
            return DirectoryEntryInfo(offset: at, name: Array(tree.rootName.utf8), attributes: try virtualAttributes(VirtualPath(tree: tree, path: "")))
        }
    }
}
