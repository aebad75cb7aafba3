import Foundation
import Crypto

/// `Backups/` at the workspace root: every device's backed-up files, read-only, by
/// device, then capture year and month (BackupsLayout.swift has the names), generated
/// from the records table. Sizes and dates come from the records, so listing and
/// `ls -l` never fetch content; reading a file fetches what the read needs
/// (RemoteReads.swift).
///
/// The tree is an index in memory, built from the table at first use and again after
/// the feed changed it (`reload()`), so a lookup is a dictionary access.
/// `@unchecked Sendable`: the index is replaced and read under `lock`.
public final class BackupsTree: VirtualTree, @unchecked Sendable {
    /// "Backups", unless the workspace has a folder of its own by that name (made before
    /// this tree existed): then `alternativeRootName`, so nothing of the user's is hidden.
    public let rootName: String
    public static let preferredRootName = "Backups"
    public static let alternativeRootName = "Backups (all devices)"
    /// `Backups/` adds no attributes to real files; its prefix is the drive's own.
    public let attributePrefix = "user.vdrive."

    private let table: RecordsTable
    private let lock = NSLock()
    private var index: Index?

    public init(table: RecordsTable, rootName: String = BackupsTree.preferredRootName) {
        self.table = table
        self.rootName = rootName
    }

    /// Forgets the index: the next lookup reads the table again.
    public func reload() { lock.withLock { index = nil } }

    struct Index {
        var nodes: [String: VirtualNode] = ["": .directory(mtime: nil)]
        var children: [String: [VirtualEntry]] = ["": []]
    }

    private func current() -> Index {
        lock.lock(); defer { lock.unlock() }
        if let index { return index }
        let built: Index
        do { built = Self.build(versions: try table.versions(), names: try table.names()) } catch {
            DriveLog.error("Backups/ cannot read the records table: \(error); it shows nothing until the next change")
            built = Index()
        }
        index = built
        return built
    }

    public func entries(in path: String) -> [VirtualEntry]? {
        let index = current()
        guard case .directory = index.nodes[path] else { return nil }
        return index.children[path] ?? []
    }

    public func content(of path: String) -> [UInt8]? { nil }

    public func node(at path: String) -> VirtualNode? { current().nodes[path] }

    public func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] { [:] }

    /// The tree of `versions` (by device, path and sequence, as `RecordsTable.versions()`
    /// returns them) with the names the table gave.
    static func build(versions: [RemoteVersion], names: [RecordsTable.NameKey: String]) -> Index {
        var index = Index()
        var mtimes: [String: Int64] = [:]
        func add(_ path: String, _ node: VirtualNode, date: Int64) {
            if index.nodes[path] == nil {
                index.nodes[path] = node
                let slash = path.lastIndex(of: "/")
                let parent = slash.map { String(path[..<$0]) } ?? ""
                let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
                var isDirectory = false
                if case .directory = node { isDirectory = true; index.children[path] = [] }
                index.children[parent, default: []].append(VirtualEntry(name: name, isDirectory: isDirectory))
            }
            // A folder's mtime is its newest file's date, so `ls -l Backups/phone` is dated too.
            var p = path
            while let slash = p.lastIndex(of: "/") {
                p = String(p[..<slash])
                mtimes[p] = max(mtimes[p] ?? .min, date)
            }
            mtimes[""] = max(mtimes[""] ?? .min, date)
        }
        var start = 0
        while start < versions.count {
            var end = start + 1
            while end < versions.count, versions[end].device == versions[start].device, versions[end].path == versions[start].path { end += 1 }
            let all = versions[start..<end]
            start = end
            let latest = all.last!
            // Names a server would refuse anyway ("." and ".." are device-name patterns).
            if latest.device == "." || latest.device == ".." { continue }
            let folder = BackupsLayout.folder(for: latest.shownDate)
            let name = names[RecordsTable.NameKey(device: latest.device, path: latest.path, folder: folder)]
                ?? BackupsLayout.baseName(of: latest.path)
            let year = latest.device + "/" + folder.prefix(4)
            add(latest.device, .directory(mtime: nil), date: latest.shownDate)
            add(year, .directory(mtime: nil), date: latest.shownDate)
            let month = latest.device + "/" + folder
            add(month, .directory(mtime: nil), date: latest.shownDate)
            add(month + "/" + name, .remote(RemoteFile(content: latest.content, size: latest.size, mtime: latest.shownDate)), date: latest.shownDate)
            let older = all.dropLast()
            guard !older.isEmpty else { continue }
            let versionsFolder = month + "/" + BackupsLayout.versionsFolder
            add(versionsFolder, .directory(mtime: nil), date: latest.shownDate)
            let labels = BackupsLayout.versionNames(of: name, older.map { ($0.sequence, $0.recordedAt ?? $0.mtime) })
            for (v, label) in zip(older, labels) {
                add(versionsFolder + "/" + label, .remote(RemoteFile(content: v.content, size: v.size, mtime: v.shownDate)), date: latest.shownDate)
            }
        }
        for (path, date) in mtimes where index.children[path] != nil {
            index.nodes[path] = .directory(mtime: date)
        }
        return index
    }
}
