import Foundation
import Crypto
import Storage

/// `Backups/` at the workspace root: every device's backed-up files, read-only, by
/// device, then capture year and month (BackupsLayout.swift has the names). The tree
/// is rows of the catalog, kept by the records table as it applies the feed
/// (BackupsRows.swift); this reads them on a connection of its own, so a lookup never
/// waits for a feed page being applied (WAL: readers see the last committed page).
/// Sizes and dates come from the rows, so listing and `ls -l` never fetch content;
/// reading a file fetches what the read needs (RemoteReads.swift).
///
/// Its entries are numbered by their rows (`inodeBase` + id), not by the drive's map
/// of paths, which would keep a string per file for the life of the mount.
/// `@unchecked Sendable`: the connection is used under `lock`.
public final class BackupsTree: VirtualTree, @unchecked Sendable {
    /// "Backups", unless the workspace has a folder of its own by that name (made before
    /// this tree existed): then `alternativeRootName`, so nothing of the user's is hidden.
    public let rootName: String
    public static let preferredRootName = "Backups"
    public static let alternativeRootName = "Backups (all devices)"
    /// `Backups/` adds no attributes to real files; its prefix is the drive's own.
    public let attributePrefix = "user.vdrive."
    /// The inode number of the row with id 1; the range above is this tree's.
    static let inodeBase = VirtualInodes.ownNumbersBase

    private let lock = NSLock()
    private let db: Database

    public init(table: RecordsTable, rootName: String = BackupsTree.preferredRootName) throws {
        db = try Database(path: table.catalogPath)
        try db.execute("PRAGMA query_only = 1")
        self.rootName = rootName
    }

    private func read<T>(_ body: (Database) throws -> T?) -> T? {
        lock.lock(); defer { lock.unlock() }
        do { return try body(db) } catch {
            DriveLog.error("Backups/ cannot read its rows in the catalog: \(error)")
            return nil
        }
    }

    private static let columns = "id, name, is_folder, content, size, mtime, subfolders"

    private static func item(_ row: Row) -> VirtualItem {
        let ino = inodeBase + UInt64(row.int64(0))
        if row.int(2) != 0 {
            return VirtualItem(node: .directory(mtime: row.isNull(5) ? nil : row.int64(5)), ino: ino, subfolders: row.int(6))
        }
        let content = SHA256Digest(bytes: row.bytes(3) ?? [UInt8](repeating: 0, count: 32))
        return VirtualItem(node: .remote(RemoteFile(content: content, size: row.int64(4), mtime: row.int64(5))), ino: ino, subfolders: nil)
    }

    public func item(at path: String) -> VirtualItem? {
        read { db in
            if path.isEmpty {
                // The root has no row: the drive numbers it; its date is its newest device's.
                let root = try BackupsRows.summary(of: "", db)
                return VirtualItem(node: .directory(mtime: root.newest), ino: nil, subfolders: root.subfolders)
            }
            let (parent, name) = BackupsRows.split(path)
            return try db.queryOne("SELECT \(Self.columns) FROM backups_entries WHERE folder = ? AND name = ?", parent, name, row: Self.item)
        }
    }

    public func node(at path: String) -> VirtualNode? { item(at: path)?.node }

    public func entries(in path: String) -> [VirtualEntry]? {
        read { db in
            guard try BackupsRows.isFolder(path, db) else { return nil }
            return try db.query("SELECT name, is_folder FROM backups_entries WHERE folder = ? ORDER BY id", path) {
                VirtualEntry(name: $0.string(0) ?? "", isDirectory: $0.int(1) != 0)
            }
        }
    }

    /// A page of a folder by row id: the id is the cookie, so a folder that changes
    /// between two pages lists each entry that stays exactly once.
    public func listing(of path: String, after cookie: Int64, limit: Int) -> [VirtualListing]? {
        read { db in
            guard try BackupsRows.isFolder(path, db) else { return nil }
            return try db.query("SELECT \(Self.columns) FROM backups_entries WHERE folder = ? AND id > ? ORDER BY id LIMIT ?",
                                path, max(0, cookie), limit) {
                VirtualListing(cookie: $0.int64(0), name: $0.string(1) ?? "", item: Self.item($0))
            }
        }
    }

    public func path(ofInode ino: UInt64) -> String? {
        guard ino > Self.inodeBase, ino - Self.inodeBase < 1 << 56 else { return nil }
        return read { db in
            try db.queryOne("SELECT folder, name FROM backups_entries WHERE id = ?", Int64(ino - Self.inodeBase)) {
                let folder = $0.string(0) ?? "", name = $0.string(1) ?? ""
                return folder.isEmpty ? name : folder + "/" + name
            }
        }
    }

    public func content(of path: String) -> [UInt8]? { nil }

    public func attributes(ofFileAt path: String, ino: UInt64) -> [String: [UInt8]] { [:] }
}

/// A backed-up file: a device and its path there.
public struct RecordKey: Hashable, Sendable {
    public let device: String
    public let path: String
    public init(device: String, path: String) { self.device = device; self.path = path }
}
