import Foundation
import Crypto
import Storage

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
            // Building it read the whole table: the heap gives back what that read freed
            // (with 100,000 records, the mount's RSS after a listing went from 155-159 MB
            // to 131 MB, `vdrive-bench restore --sections rss`).
            DaemonTuning.returnFreedMemory()
        }
        return body(index!)
    }

    public func entries(in path: String) -> [VirtualEntry]? {
        withIndex { index in
            index.folders[path].map { folder in
                folder.entries.map { name, entry in
                    if case .folder = entry { return VirtualEntry(name: name, isDirectory: true) }
                    return VirtualEntry(name: name, isDirectory: false)
                }
            }
        }
    }

    public func content(of path: String) -> [UInt8]? { nil }

    public func node(at path: String) -> VirtualNode? { withIndex { $0.node(at: path) } }

    public func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] { [:] }

    /// The tree (paths relative to `Backups/`): its folders by path, each with its
    /// entries by name, and where each file was placed, so a change removes exactly that.
    /// Files are kept by name in their folder, not by whole path: names are short
    /// (Swift keeps up to 15 bytes without an allocation). `vdrive-bench backups`
    /// measures its memory (benchmarks.md).
    struct Index {
        var folders: [String: Folder] = ["": Folder()]
        var placed: [RecordKey: Placement] = [:]

        struct Folder {
            /// The newest date of what it holds (nil while empty).
            var mtime: Int64?
            var entries: [String: Entry] = [:]
        }

        enum Entry {
            case folder
            case file(RemoteFile)
        }

        /// A file's current version (`name` in `folder`) and its older versions (names in `folder/.versions`).
        struct Placement {
            let folder: String
            let name: String
            let older: [String]
        }

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

        func node(at path: String) -> VirtualNode? {
            if let folder = folders[path] { return .directory(mtime: folder.mtime) }
            let (parent, name) = Self.split(path)
            guard case .file(let file)? = folders[parent]?.entries[name] else { return nil }
            return .remote(file)
        }

        /// Adds a file's current version and its older ones; returns the folders touched.
        /// `names`: folder → the name the table gave the file there.
        mutating func place(_ all: ArraySlice<RemoteVersion>, names: [String: String]) -> Set<String> {
            guard let latest = all.last, latest.device != ".", latest.device != ".." else { return [] }
            let key = RecordKey(device: latest.device, path: latest.path)
            let date = BackupsLayout.folder(for: latest.shownDate)
            let name = names[date] ?? BackupsLayout.baseName(of: latest.path)
            let month = latest.device + "/" + date
            addFolders(month)
            folders[month]!.entries[name] = .file(RemoteFile(content: latest.content, size: latest.size, mtime: latest.shownDate))
            var touched: Set<String> = [month]
            let older = all.dropLast()
            var labels: [String] = []
            if !older.isEmpty {
                let versionsFolder = month + "/" + BackupsLayout.versionsFolder
                addFolders(versionsFolder)
                touched.insert(versionsFolder)
                labels = BackupsLayout.versionNames(of: name, older.map { ($0.sequence, $0.recordedAt ?? $0.mtime) })
                for (v, label) in zip(older, labels) {
                    folders[versionsFolder]!.entries[label] = .file(RemoteFile(content: v.content, size: v.size, mtime: v.shownDate))
                }
            }
            placed[key] = Placement(folder: month, name: name, older: labels)
            return touched
        }

        /// Removes what a file placed; returns the folders touched.
        mutating func remove(_ key: RecordKey) -> Set<String> {
            guard let p = placed.removeValue(forKey: key) else { return [] }
            folders[p.folder]?.entries[p.name] = nil
            guard !p.older.isEmpty else { return [p.folder] }
            let versionsFolder = p.folder + "/" + BackupsLayout.versionsFolder
            for label in p.older { folders[versionsFolder]?.entries[label] = nil }
            return [p.folder, versionsFolder]
        }

        /// Folders touched, deepest first: an empty one goes (its parent is touched in
        /// turn), the others take their newest entry's date.
        mutating func settle(_ touched: Set<String>) {
            // By depth, deepest first: a folder's parent is one level up, settled after it.
            var levels: [Int: Set<String>] = [:]
            for f in touched { levels[Self.depth(f), default: []].insert(f) }
            var depth = levels.keys.max() ?? -1
            while depth >= 0 {
                for folder in levels.removeValue(forKey: depth) ?? [] {
                    if let parent = settle(folder) { levels[depth - 1, default: []].insert(parent) }
                }
                depth -= 1
            }
        }

        /// Settles one folder; returns its parent when that must be settled too.
        private mutating func settle(_ path: String) -> String? {
            guard let folder = folders[path] else { return nil }
            if folder.entries.isEmpty && !path.isEmpty {
                folders[path] = nil
                let (parent, name) = Self.split(path)
                folders[parent]?.entries[name] = nil
                return parent
            }
            let newest = folder.entries.compactMap { name, entry -> Int64? in
                switch entry {
                case .file(let f): return f.mtime
                case .folder: return folders[path.isEmpty ? name : path + "/" + name]?.mtime
                }
            }.max()
            guard newest != folder.mtime else { return nil }
            folders[path]!.mtime = newest
            return path.isEmpty ? nil : Self.split(path).parent
        }

        /// `device/2019/07` and each folder above it, as far as they are missing.
        private mutating func addFolders(_ path: String) {
            guard !path.isEmpty, folders[path] == nil else { return }
            let (parent, name) = Self.split(path)
            addFolders(parent)
            folders[path] = Folder()
            folders[parent]!.entries[name] = .folder
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
