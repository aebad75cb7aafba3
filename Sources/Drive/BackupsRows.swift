import Foundation
import Crypto
import Storage

/// `Backups/` as rows of the catalog: every folder and file of the tree, placed from the
/// records (BackupsLayout.swift has the names) in the same transaction that applies a
/// feed page, so the tree and the records never disagree, and read by `BackupsTree`
/// with one indexed query per lookup or listing page.
///
/// Why rows and not an index in memory: with 100,000 records the index, its keys and
/// the inode numbers given to its paths held about 60 MB of the mount's heap for the
/// life of the mount, and its build at the first lookup read the whole table at once
/// (Docs/benchmarks.md, "Restore"). Rows cost the page cache SQLite keeps, and a change
/// of one file touches that file's rows and its folders'.
///
/// - A row's id is the inode number's low part (`BackupsTree.inodeBase` + id): ids are
///   never reused (AUTOINCREMENT), so an inode the kernel still knows never names
///   another file. A file's row stays while it shows the same version at the same
///   place; a new version is a new row, a new inode, so cached pages of the old one
///   are never served as the new one's.
/// - A folder row exists while the folder holds something; its `mtime` is the newest
///   date of what it holds, `subfolders` its folders (the folder's link count).
/// - A listing goes by id within a folder: the id is the directory offset, stable
///   while the folder changes.
enum BackupsRows {
    static let migration = Migration("drive-backups-rows-1", """
        CREATE TABLE backups_entries (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            folder TEXT NOT NULL,
            name TEXT NOT NULL,
            is_folder INTEGER NOT NULL,
            device TEXT,
            path TEXT,
            content BLOB,
            size INTEGER NOT NULL DEFAULT 0,
            mtime INTEGER,
            subfolders INTEGER NOT NULL DEFAULT 0
        );
        CREATE UNIQUE INDEX backups_entries_by_name ON backups_entries(folder, name);
        CREATE INDEX backups_entries_in_order ON backups_entries(folder, id, mtime);
        CREATE INDEX backups_entries_by_record ON backups_entries(device, path) WHERE NOT is_folder;
        CREATE INDEX backups_entries_folders ON backups_entries(folder) WHERE is_folder;
        """, code: { db in try rebuild(db) })

    /// One entry a file shows: its current version in its month, or an older one in `.versions`.
    private struct Shown: Equatable {
        let folder: String
        let name: String
        let content: [UInt8]
        let size: Int64
        let mtime: Int64
    }

    /// Every row placed again from the records (the migration, for a catalog that
    /// learned records before the tree was rows; tests compare it with rows kept up to
    /// date page by page).
    static func rebuild(_ db: Database) throws {
        try db.execute("DELETE FROM backups_entries")
        let keys = try db.query("SELECT device, path FROM remote_versions GROUP BY device, path ORDER BY max(sequence)") {
            RecordKey(device: $0.string(0) ?? "", path: $0.string(1) ?? "")
        }
        try place(keys, db)
    }

    /// Places the files of `keys` again from their records, in that order (a file's new
    /// rows are listed after the others), then settles the folders touched.
    static func place(_ keys: [RecordKey], _ db: Database) throws {
        var seen = Set<RecordKey>()
        let lastChanges = keys.reversed().filter { seen.insert($0).inserted }.reversed()   // each file at its last change
        var touched = Set<String>()
        for key in lastChanges { touched.formUnion(try place(key, db)) }
        try settle(touched, db)
    }

    /// Drops every row (the records were forgotten: the feed is learned again).
    static func clear(_ db: Database) throws {
        try db.execute("DELETE FROM backups_entries")
    }

    /// The rows one file should have, against those it has: rows that stay keep their
    /// ids. Returns the folders touched.
    private static func place(_ key: RecordKey, _ db: Database) throws -> Set<String> {
        let wanted = try shown(key, db)
        let had = try db.query("SELECT id, folder, name, content, size, mtime FROM backups_entries WHERE device = ? AND path = ? AND NOT is_folder",
                               key.device, key.path) {
            ($0.int64(0), Shown(folder: $0.string(1) ?? "", name: $0.string(2) ?? "", content: $0.bytes(3) ?? [],
                                size: $0.int64(4), mtime: $0.int64(5)))
        }
        var touched = Set<String>()
        for (id, entry) in had where !wanted.contains(entry) {
            try db.run("DELETE FROM backups_entries WHERE id = ?", id)
            touched.insert(entry.folder)
        }
        for entry in wanted where !had.contains(where: { $0.1 == entry }) {
            touched.formUnion(try addFolders(entry.folder, db))
            // A name is given once per folder (RecordsTable.nameFile), so nothing else
            // holds it; were it held, the newest placement wins, as a listing would show.
            try db.run("""
                INSERT OR REPLACE INTO backups_entries(folder, name, is_folder, device, path, content, size, mtime)
                VALUES (?, ?, 0, ?, ?, ?, ?, ?)
                """, entry.folder, entry.name, key.device, key.path, entry.content, entry.size, entry.mtime)
            touched.insert(entry.folder)
        }
        return touched
    }

    /// Where a file shows: its current version in the month of its date under the name
    /// the table gave it there, its older versions in that month's `.versions`.
    private static func shown(_ key: RecordKey, _ db: Database) throws -> [Shown] {
        let all = try RecordsTable.versions(of: key, db)
        guard let latest = all.last, !latest.device.isEmpty, latest.device != ".", latest.device != ".." else { return [] }
        let date = BackupsLayout.folder(for: latest.shownDate)
        let given = try db.queryOne("SELECT name FROM remote_names WHERE device = ? AND path = ? AND folder = ?", key.device, key.path, date) {
            $0.string(0)
        }
        let name = (given ?? nil) ?? BackupsLayout.baseName(of: latest.path)
        let month = latest.device + "/" + date
        var out = [Shown(folder: month, name: name, content: latest.content.bytes, size: latest.size, mtime: latest.shownDate)]
        let older = all.dropLast()
        guard !older.isEmpty else { return out }
        let labels = BackupsLayout.versionNames(of: name, older.map { ($0.sequence, $0.recordedAt ?? $0.mtime) })
        for (v, label) in zip(older, labels) {
            out.append(Shown(folder: month + "/" + BackupsLayout.versionsFolder, name: label, content: v.content.bytes, size: v.size, mtime: v.shownDate))
        }
        return out
    }

    /// `device/2019/07` and each folder above it, as far as they are missing; returns
    /// those added and their parents (whose folder counts change).
    private static func addFolders(_ path: String, _ db: Database) throws -> Set<String> {
        guard try !isFolder(path, db) else { return [] }
        let (parent, name) = split(path)
        var added = try addFolders(parent, db)
        try db.run("INSERT OR REPLACE INTO backups_entries(folder, name, is_folder) VALUES (?, ?, 1)", parent, name)
        added.insert(path)
        added.insert(parent)
        return added
    }

    /// Folders touched, deepest first: an empty one goes (its parent is touched in
    /// turn), the others take their newest entry's date and count their folders.
    static func settle(_ touched: Set<String>, _ db: Database) throws {
        var levels: [Int: Set<String>] = [:]
        for f in touched where !f.isEmpty { levels[depth(f), default: []].insert(f) }
        var level = levels.keys.max() ?? 0
        while level > 0 {
            for folder in levels.removeValue(forKey: level) ?? [] {
                if let parent = try settle(folder, db), !parent.isEmpty { levels[level - 1, default: []].insert(parent) }
            }
            level -= 1
        }
    }

    /// Settles one folder; returns its parent when that must be settled too.
    private static func settle(_ path: String, _ db: Database) throws -> String? {
        let (parent, name) = split(path)
        guard let (id, mtime, subfolders) = try db.queryOne(
            "SELECT id, mtime, subfolders FROM backups_entries WHERE folder = ? AND name = ? AND is_folder", parent, name,
            row: { ($0.int64(0), $0.isNull(1) ? nil : $0.int64(1), $0.int(2)) }) else { return nil }
        let held = try db.queryOne("SELECT 1 FROM backups_entries WHERE folder = ? LIMIT 1", path) { _ in true } ?? false
        if !held {
            try db.run("DELETE FROM backups_entries WHERE id = ?", id)
            return parent
        }
        let (newest, folders) = try summary(of: path, db)
        guard newest != mtime || folders != subfolders else { return nil }
        try db.run("UPDATE backups_entries SET mtime = ?, subfolders = ? WHERE id = ?", newest, folders, id)
        return newest != mtime ? parent : nil
    }

    /// True for the tree's root ("") and for a folder that has a row.
    static func isFolder(_ path: String, _ db: Database) throws -> Bool {
        guard !path.isEmpty else { return true }
        let (parent, name) = split(path)
        return try db.queryOne("SELECT 1 FROM backups_entries WHERE folder = ? AND name = ? AND is_folder", parent, name) { _ in true } ?? false
    }

    /// What a folder's row says of it, computed from what it holds: the newest date and
    /// the number of folders (for the root, which has no row, they are read each time).
    static func summary(of folder: String, _ db: Database) throws -> (newest: Int64?, subfolders: Int) {
        let newest = try db.queryOne("SELECT max(mtime) FROM backups_entries WHERE folder = ?", folder) { $0.isNull(0) ? nil : $0.int64(0) } ?? nil
        let folders = try db.queryOne("SELECT count(*) FROM backups_entries WHERE folder = ? AND is_folder", folder) { $0.int(0) } ?? 0
        return (newest, folders)
    }

    static func split(_ path: String) -> (parent: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }

    private static func depth(_ path: String) -> Int { path.utf8.reduce(1) { $0 + ($1 == 0x2F ? 1 : 0) } }
}
