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

    /// What `path` is, with what the drive would otherwise work out itself: the inode
    /// number the tree gives it and a folder's number of folders. The default: `node(at:)`.
    func item(at path: String) -> VirtualItem?
    /// At most `limit` entries of the folder `path` with cookies above `cookie`, in
    /// cookie order (nil when `path` is not a folder). The default: `entries(in:)` by
    /// name, each cookie its position from 1.
    func listing(of path: String, after cookie: Int64, limit: Int) -> [VirtualListing]?
    /// The path of an inode number the tree gave (`VirtualItem.ino`), nil for any other.
    func path(ofInode ino: UInt64) -> String?
}

extension VirtualTree {
    public func node(at path: String) -> VirtualNode? {
        if entries(in: path) != nil { return .directory(mtime: nil) }
        if let content = content(of: path) { return .generated(content) }
        return nil
    }

    public func item(at path: String) -> VirtualItem? {
        node(at: path).map { VirtualItem(node: $0, ino: nil, subfolders: nil) }
    }

    public func listing(of path: String, after cookie: Int64, limit: Int) -> [VirtualListing]? {
        guard let entries = entries(in: path) else { return nil }
        var out: [VirtualListing] = []
        for (i, e) in entries.sorted(by: { $0.name < $1.name }).enumerated().dropFirst(max(0, Int(cookie))) {
            guard out.count < limit else { break }
            guard let item = item(at: path.isEmpty ? e.name : path + "/" + e.name) else { continue }
            out.append(VirtualListing(cookie: Int64(i) + 1, name: e.name, item: item))
        }
        return out
    }

    public func path(ofInode ino: UInt64) -> String? { nil }
}

/// A path of a virtual tree: what it is and, when the tree knows them, its inode number
/// (nil: the drive numbers it by path) and for a folder its number of folders (nil:
/// the drive counts them from its entries).
public struct VirtualItem: Sendable, Equatable {
    public let node: VirtualNode
    public let ino: UInt64?
    public let subfolders: Int?
    public init(node: VirtualNode, ino: UInt64?, subfolders: Int?) { self.node = node; self.ino = ino; self.subfolders = subfolders }
    public var isFolder: Bool { if case .directory = node { return true } else { return false } }
}

/// One entry of a folder's listing page; `cookie` (≥ 1) is where the next page goes on.
public struct VirtualListing: Sendable {
    public let cookie: Int64
    public let name: String
    public let item: VirtualItem
    public init(cookie: Int64, name: String, item: VirtualItem) { self.cookie = cookie; self.name = name; self.item = item }
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

/// Inode numbers for virtual paths (`.backup/status`, the `Backups` folder itself, keyed
/// by the path from the workspace root, and for a remote file its content after a NUL):
/// a range the catalog never reaches, assigned on first sight and stable for the life
/// of the process. Trees that number their own paths (`VirtualItem.ino`) do so from
/// `ownNumbersBase` on.
/// `@unchecked Sendable`: the tables are guarded by `lock`.
final class VirtualInodes: @unchecked Sendable {
    static let base: UInt64 = 1 << 56
    static let ownNumbersBase: UInt64 = 1 << 57
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
        guard VirtualInodes.contains(ino) else { return nil }
        if ino >= VirtualInodes.ownNumbersBase {
            for tree in virtualTrees { if let path = tree.path(ofInode: ino) { return VirtualPath(tree: tree, path: path) } }
            return nil
        }
        guard let key = virtualInodes.path(of: ino) else { return nil }
        let full = key.split(separator: "\u{0}", maxSplits: 1).first.map(String.init) ?? key
        let root = full.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let tree = virtualTrees.first(where: { $0.rootName == root[0] }) else { return nil }
        return VirtualPath(tree: tree, path: root.count > 1 ? String(root[1]) : "")
    }

    /// Attributes of a virtual path: folders r-x, files r--, owned by the mount's user.
    func virtualAttributes(_ v: VirtualPath) throws -> NodeAttributes {
        guard let item = v.tree.item(at: v.path) else { throw Errno.noSuchFileOrDirectory }
        return virtualAttributes(item, at: v)
    }

    func virtualAttributes(_ item: VirtualItem, at v: VirtualPath) -> NodeAttributes {
        // A remote file's inode is its path and content (a tree numbering its own files
        // keeps the same rule): a new version at the same path is a new inode to the
        // kernel, so pages cached from the old one (still open somewhere) are never
        // served as the new one's.
        let ino = item.ino ?? {
            var key = v.full
            if case .remote(let file) = item.node { key += "\u{0}" + file.content.hex }
            return virtualInodes.ino(for: key)
        }()
        let now = nowNanoseconds()
        switch item.node {
        case .directory(let mtime):
            let subfolders = item.subfolders ?? (v.tree.entries(in: v.path) ?? []).filter(\.isDirectory).count
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

    /// At most `limit` entries after `offset`: a reply buffer's worth, asked of the tree
    /// as one page. A `Backups/` month can hold tens of thousands of files (a listing
    /// that made every entry's attributes for every page held 22 MB at once with
    /// 100,000 files in one folder, heaptrack).
    func virtualReaddir(_ ino: UInt64, after offset: Int64, limit: Int) throws -> [DirectoryEntryInfo] {
        guard let v = virtualPath(of: ino) else { throw Errno.noSuchFileOrDirectory }
        var out: [DirectoryEntryInfo] = []
        let me = try virtualAttributes(v)
        if offset < 1 { out.append(DirectoryEntryInfo(offset: 1, name: Array(".".utf8), attributes: me)) }
        if offset < 2 { out.append(DirectoryEntryInfo(offset: 2, name: Array("..".utf8), attributes: me)) }
        // The tree's cookies follow "." and "..": offset = cookie + 2.
        guard let page = v.tree.listing(of: v.path, after: offset - 2, limit: max(0, limit - out.count)) else { throw Errno.notDirectory }
        if out.count >= limit { return Array(out.prefix(limit)) }
        for e in page {
            out.append(DirectoryEntryInfo(offset: e.cookie + 2, name: Array(e.name.utf8), attributes: virtualAttributes(e.item, at: v.child(e.name))))
        }
        return out
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
