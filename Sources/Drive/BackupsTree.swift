import Foundation
import Crypto

/// `Backups/` at the workspace root: every device's backed-up files, read-only, by
/// device, then capture year and month (BackupsLayout.swift has the names), generated
/// from the records table. Sizes and dates come from the records, so listing and
/// `ls -l` never fetch content; reading a file fetches what the read needs
/// (RemoteReads.swift).
///
/// The tree is an index in memory (a lookup is a dictionary access), built from the
/// whole table at first use; after the feed changed some files, only their entries
/// are placed again (`update`), so a change costs the files it touched, not the
/// workspace (a full build of 100,000 records took 2.3 s in a debug build).
/// `@unchecked Sendable`: the index is read and changed under `lock`.
public final class BackupsTree: VirtualTree, @unchecked Sendable {
    /// "Backups", unless the workspace has a folder of its own by that name (made before
    /// this tree existed): then `alternativeRootName`, so nothing of the user's is hidden.
    public let rootName: String
    public static let preferredRootName = "Backups"
    public static let alternativeRootName = "Backups (all devices)"
    /// `Backups/` adds no attributes to real files; its prefix is the drive's own.
    public let attributePrefix = "user.vdrive."

    /// Above this many changed files, building the index again is cheaper than placing each.
    static let updateLimit = 2_000

    private let table: RecordsTable
    private let lock = NSLock()
    private var index: Index?

    public init(table: RecordsTable, rootName: String = BackupsTree.preferredRootName) {
        self.table = table
        self.rootName = rootName
    }

    /// Forgets the index: the next lookup reads the whole table again.
    public func reload() { lock.withLock { index = nil } }

    /// Places the files of `changed` again from the table (after the feed changed them).
    public func update(_ changed: Set<RecordKey>) {
        lock.lock(); defer { lock.unlock() }
        guard index != nil else { return }   // not built yet: the build will read them
        if changed.count > Self.updateLimit { index = nil; return }
        do {
            var affected = Set<String>()
            for key in changed {
                affected.formUnion(index!.remove(key))
                affected.formUnion(index!.place(try table.versions(of: key)[...], names: try table.names(of: key)))
            }
            index!.settle(affected)
        } catch {
            DriveLog.error("Backups/ cannot read the records table: \(error); it is read again at the next lookup")
            index = nil
        }
    }

    private func withIndex<T>(_ body: (Index) -> T) -> T {
        lock.lock(); defer { lock.unlock() }
        if index == nil {
            do { index = Index(versions: try table.versions(), names: try table.names()) } catch {
                DriveLog.error("Backups/ cannot read the records table: \(error); it shows nothing until the next change")
                return body(Index())
            }
        }
        return body(index!)
    }

    public func entries(in path: String) -> [VirtualEntry]? {
        withIndex { index in
            guard case .directory = index.nodes[path] else { return nil }
            return (index.children[path] ?? [:]).map { VirtualEntry(name: $0.key, isDirectory: $0.value) }
        }
    }

    public func content(of path: String) -> [UInt8]? { nil }

    public func node(at path: String) -> VirtualNode? { withIndex { $0.nodes[path] } }

    public func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] { [:] }

    /// The tree's paths (relative to `Backups/`): nodes, each folder's children (name →
    /// is a folder), and the paths each file placed, so a change removes exactly those.
    struct Index {
        var nodes: [String: VirtualNode] = ["": .directory(mtime: nil)]
        var children: [String: [String: Bool]] = ["": [:]]
        var placed: [RecordKey: [String]] = [:]

        init() {}

        /// The whole tree of `versions` (by device, path and sequence, as
        /// `RecordsTable.versions()` returns them) with the names the table gave.
        init(versions: [RemoteVersion], names: [RecordKey: [String: String]]) {
            var affected = Set<String>()
            var start = 0
            while start < versions.count {
                var end = start + 1
                while end < versions.count, versions[end].device == versions[start].device, versions[end].path == versions[start].path { end += 1 }
                let key = RecordKey(device: versions[start].device, path: versions[start].path)
                affected.formUnion(place(versions[start..<end], names: names[key] ?? [:]))
                start = end
            }
            settle(affected)
        }

        /// Adds a file's current version and its older ones; returns the folders touched.
        /// `names`: folder → the name the table gave the file there.
        mutating func place(_ all: ArraySlice<RemoteVersion>, names: [String: String]) -> Set<String> {
            guard let latest = all.last, latest.device != ".", latest.device != ".." else { return [] }
            let key = RecordKey(device: latest.device, path: latest.path)
            let folder = BackupsLayout.folder(for: latest.shownDate)
            let name = names[folder] ?? BackupsLayout.baseName(of: latest.path)
            let month = latest.device + "/" + folder
            var paths = [month + "/" + name]
            var touched: Set<String> = [month]
            addFolders(month)
            add(month + "/" + name, .remote(RemoteFile(content: latest.content, size: latest.size, mtime: latest.shownDate)))
            let older = all.dropLast()
            if !older.isEmpty {
                let versionsFolder = month + "/" + BackupsLayout.versionsFolder
                addFolders(versionsFolder)
                touched.insert(versionsFolder)
                let labels = BackupsLayout.versionNames(of: name, older.map { ($0.sequence, $0.recordedAt ?? $0.mtime) })
                for (v, label) in zip(older, labels) {
                    add(versionsFolder + "/" + label, .remote(RemoteFile(content: v.content, size: v.size, mtime: v.shownDate)))
                    paths.append(versionsFolder + "/" + label)
                }
            }
            placed[key] = paths
            return touched
        }

        /// Removes what a file placed; returns the folders touched.
        mutating func remove(_ key: RecordKey) -> Set<String> {
            guard let paths = placed.removeValue(forKey: key) else { return [] }
            var touched = Set<String>()
            for path in paths {
                nodes[path] = nil
                let (parent, name) = Self.split(path)
                children[parent]?[name] = nil
                touched.insert(parent)
            }
            return touched
        }

        /// Folders touched, deepest first: an empty one goes (its parent is touched in
        /// turn), the others take their newest child's date.
        mutating func settle(_ folders: Set<String>) {
            // By depth, deepest first: a folder's parent is one level up, settled after it.
            var levels: [Int: Set<String>] = [:]
            for f in folders { levels[Self.depth(f), default: []].insert(f) }
            var depth = levels.keys.max() ?? -1
            while depth >= 0 {
                for folder in levels.removeValue(forKey: depth) ?? [] {
                    if let parent = settle(folder) { levels[depth - 1, default: []].insert(parent) }
                }
                depth -= 1
            }
        }

        /// Settles one folder; returns its parent when that must be settled too.
        private mutating func settle(_ folder: String) -> String? {
            guard nodes[folder] != nil else { return nil }
            let names = children[folder] ?? [:]
            if names.isEmpty && !folder.isEmpty {
                nodes[folder] = nil
                children[folder] = nil
                let (parent, name) = Self.split(folder)
                children[parent]?[name] = nil
                return parent
            }
            let newest = names.keys.compactMap { name -> Int64? in
                switch nodes[folder.isEmpty ? name : folder + "/" + name] {
                case .remote(let f)?: return f.mtime
                case .directory(let m)?: return m
                default: return nil
                }
            }.max()
            if case .directory(let old) = nodes[folder], old != newest {
                nodes[folder] = .directory(mtime: newest)
                if !folder.isEmpty { return Self.split(folder).parent }
            }
            return nil
        }

        private mutating func add(_ path: String, _ node: VirtualNode) {
            nodes[path] = node
            let (parent, name) = Self.split(path)
            var isDirectory = false
            if case .directory = node { isDirectory = true }
            children[parent, default: [:]][name] = isDirectory
        }

        /// `device/2019/07` and each folder above it, as far as they are missing.
        private mutating func addFolders(_ path: String) {
            guard !path.isEmpty, nodes[path] == nil else { return }
            addFolders(Self.split(path).parent)
            add(path, .directory(mtime: nil))
            children[path] = [:]
        }

        static func split(_ path: String) -> (parent: String, name: String) {
            guard let slash = path.lastIndex(of: "/") else { return ("", path) }
            return (String(path[..<slash]), String(path[path.index(after: slash)...]))
        }

        static func depth(_ path: String) -> Int { path.isEmpty ? 0 : path.utf8.reduce(1) { $0 + ($1 == 0x2F ? 1 : 0) } }
    }
}

/// A backed-up file: a device and its path there.
public struct RecordKey: Hashable, Sendable {
    public let device: String
    public let path: String
    public init(device: String, path: String) { self.device = device; self.path = path }
}
