import Foundation
import Crypto
import Storage

/// The server's records as this drive last learned them, kept in the catalog so
/// `Backups/` lists while the server is down and across restarts:
///
/// - `remote_versions`: every version of every device's backed-up files, by the
///   server's sequence (the current version of a (device, path) is its highest).
/// - `remote_names`: the name each (device, path) got in each `Backups/` folder it
///   appeared in, assigned once (BackupsLayout.swift), so names never change.
/// - `remote_contents`: block lists of contents, fetched once when a file is read.
/// - `remote_feed`: the feed cursor (the highest sequence applied) and the identity of
///   the workspace the records came from.
/// - `backups_entries`: the `Backups/` tree made from them (BackupsRows.swift).
///
/// A feed page is applied in one transaction with the cursor and the tree's rows it
/// changes, reading the cursor inside it: a mount and `vdrive task run
/// us.virtualdrive.sync` may both follow the feed into one catalog, and each entry is
/// applied exactly once.
/// `@unchecked Sendable`: the connection is used under `lock`.
public final class RecordsTable: @unchecked Sendable {
    static let migrations = [
        Migration("drive-remote-records-1", """
        CREATE TABLE remote_versions (
            sequence INTEGER PRIMARY KEY,
            device TEXT NOT NULL,
            path TEXT NOT NULL,
            content TEXT NOT NULL,
            size INTEGER NOT NULL,
            capture_date INTEGER,
            mtime INTEGER NOT NULL,
            recorded_at INTEGER
        );
        CREATE INDEX remote_versions_by_key ON remote_versions(device, path, sequence);
        CREATE TABLE remote_names (
            device TEXT NOT NULL,
            folder TEXT NOT NULL,
            name TEXT NOT NULL,
            path TEXT NOT NULL,
            PRIMARY KEY (device, folder, name)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX remote_names_by_path ON remote_names(device, path, folder);
        CREATE TABLE remote_contents (
            content TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            blocks BLOB NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE remote_feed (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            cursor INTEGER NOT NULL
        );
        INSERT INTO remote_feed(id, cursor) VALUES (1, 0);
        """),
        Migration("drive-remote-records-2-workspace", """
        ALTER TABLE remote_feed ADD COLUMN workspace TEXT;
        """),
        BackupsRows.migration,
    ]

    /// The names of this table's migrations (a task without a mount applies only these).
    public static var migrationNames: [String] { migrations.map(\.name) }

    private let lock = NSLock()
    private let db: Database
    /// The catalog's path (`BackupsTree` opens a connection of its own to it).
    public let catalogPath: String

    /// A connection of its own to the catalog at `catalogPath` (migrated already).
    /// `synchronous=NORMAL` on this connection only: in WAL mode a commit then skips its
    /// fsync. The records can always be learned again from the server, and a page and
    /// its cursor are one transaction, so a power cut loses the last pages together
    /// (the next catch-up asks for them again), never one without the other.
    public init(catalogPath: String) throws {
        db = try Database(path: catalogPath)
        self.catalogPath = catalogPath
        try db.execute("PRAGMA synchronous=NORMAL")
    }

    private func locked<T>(_ body: (Database) throws -> T) throws -> T {
        lock.lock(); defer { lock.unlock() }
        return try body(db)
    }

    /// The highest server sequence applied.
    public func cursor() throws -> Int64 {
        try locked { db in try db.queryOne("SELECT cursor FROM remote_feed WHERE id = 1") { $0.int64(0) } ?? 0 }
    }

    /// The workspace the records came from (nil: none yet, or a server that does not say).
    public func workspace() throws -> String? {
        try locked { db in try db.queryOne("SELECT workspace FROM remote_feed WHERE id = 1") { $0.string(0) } ?? nil }
    }

    /// Applies a page of the feed (entries at or below the stored cursor are skipped)
    /// and moves the cursor to its end. Returns the files whose records changed.
    /// A page of another workspace than the records' is not applied (the follower
    /// starts over first); the first page that names one records it.
    @discardableResult
    public func apply(_ page: RemoteChangePage) throws -> Set<RecordKey> {
        try locked { db in
            try db.transaction {
                let (cursor, known) = try db.queryOne("SELECT cursor, workspace FROM remote_feed WHERE id = 1") {
                    ($0.int64(0), $0.string(1))
                } ?? (0, nil)
                if let workspace = page.workspace {
                    if let known, known != workspace { return [] }
                    if known == nil { try db.run("UPDATE remote_feed SET workspace = ? WHERE id = 1", workspace) }
                }
                var changed: [RecordKey] = []   // in feed order: a folder then lists its files as they came
                for change in page.changes where change.sequence > cursor {
                    switch change {
                    case .recorded(let v):
                        try Self.record(v, db)
                        changed.append(RecordKey(device: v.device, path: v.path))
                    case .deleted(_, let version):
                        if let key = try Self.delete(version: version, db) { changed.append(key) }
                    }
                }
                if page.nextSequence > cursor {
                    try db.run("UPDATE remote_feed SET cursor = ? WHERE id = 1", page.nextSequence)
                }
                try BackupsRows.place(changed, db)
                return Set(changed)
            }
        }
    }

    /// Forgets every record, the cursor and the workspace, in one transaction: the server
    /// forgot part of its feed, or the address reaches another workspace. Returns the
    /// files that had records (Backups/ drops them until the feed names them again).
    /// Block lists stay (a content's list never changes), and so do the names given in
    /// `Backups/` (a file that comes back keeps its name).
    public func startOver() throws -> Set<RecordKey> {
        try locked { db in
            try db.transaction {
                let keys = try db.query("SELECT DISTINCT device, path FROM remote_versions") {
                    RecordKey(device: $0.string(0) ?? "", path: $0.string(1) ?? "")
                }
                try db.execute("DELETE FROM remote_versions")
                try BackupsRows.clear(db)
                try db.run("UPDATE remote_feed SET cursor = 0, workspace = NULL WHERE id = 1")
                return Set(keys)
            }
        }
    }

    private static let columns = "sequence, device, path, content, size, capture_date, mtime, recorded_at"

    private static func version(_ row: Row) -> RemoteVersion? {
        guard let content = SHA256Digest(hex: row.string(3) ?? "") else { return nil }
        return RemoteVersion(sequence: row.int64(0), device: row.string(1) ?? "", path: row.string(2) ?? "", content: content,
                             size: row.int64(4), captureDate: row.isNull(5) ? nil : row.int64(5), mtime: row.int64(6),
                             recordedAt: row.isNull(7) ? nil : row.int64(7))
    }

    private static func current(device: String, path: String, _ db: Database) throws -> RemoteVersion? {
        try db.queryOne("SELECT \(columns) FROM remote_versions WHERE device = ? AND path = ? ORDER BY sequence DESC LIMIT 1",
                        device, path, row: version) ?? nil
    }

    private static func record(_ v: RemoteVersion, _ db: Database) throws {
        // The server's rule (FileVersions.record): the current content recorded again
        // with new metadata is the same version, moved to the end of the feed.
        if let current = try current(device: v.device, path: v.path, db), current.content == v.content {
            try db.run("DELETE FROM remote_versions WHERE sequence = ?", current.sequence)
        }
        try db.run("INSERT OR REPLACE INTO remote_versions(\(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   v.sequence, v.device, v.path, v.content.hex, v.size, v.captureDate, v.mtime, v.recordedAt)
        try nameFile(device: v.device, path: v.path, folder: BackupsLayout.folder(for: v.shownDate), db)
    }

    /// Returns the file the deleted version belonged to (nil: not known here).
    private static func delete(version sequence: Int64, _ db: Database) throws -> RecordKey? {
        guard let gone = try db.queryOne("SELECT device, path FROM remote_versions WHERE sequence = ?", sequence, row: {
            ($0.string(0) ?? "", $0.string(1) ?? "")
        }) else { return nil }
        try db.run("DELETE FROM remote_versions WHERE sequence = ?", sequence)
        // An older version may be current now, dated in another folder.
        if let current = try current(device: gone.0, path: gone.1, db) {
            try nameFile(device: current.device, path: current.path, folder: BackupsLayout.folder(for: current.shownDate), db)
        }
        return RecordKey(device: gone.0, path: gone.1)
    }

    /// Gives (device, path) its permanent name in `folder`, unless it has one there.
    private static func nameFile(device: String, path: String, folder: String, _ db: Database) throws {
        if try db.queryOne("SELECT 1 FROM remote_names WHERE device = ? AND path = ? AND folder = ?", device, path, folder, row: { _ in true }) != nil {
            return
        }
        let name = try BackupsLayout.freeName(BackupsLayout.baseName(of: path)) { candidate in
            if candidate == BackupsLayout.versionsFolder { return true }
            return try db.queryOne("SELECT 1 FROM remote_names WHERE device = ? AND folder = ? AND name = ?", device, folder, candidate, row: { _ in true }) != nil
        }
        try db.run("INSERT INTO remote_names(device, folder, name, path) VALUES (?, ?, ?, ?)", device, folder, name, path)
    }

    /// Every version, by device, path and sequence (the last of a path is current).
    public func versions() throws -> [RemoteVersion] {
        try locked { db in
            try db.query("SELECT \(Self.columns) FROM remote_versions ORDER BY device, path, sequence", row: Self.version).compactMap { $0 }
        }
    }

    /// One file's versions, oldest first.
    static func versions(of key: RecordKey, _ db: Database) throws -> [RemoteVersion] {
        try db.query("SELECT \(columns) FROM remote_versions WHERE device = ? AND path = ? ORDER BY sequence",
                     key.device, key.path, row: version).compactMap { $0 }
    }

    /// The names given: file → (folder → name).
    func names() throws -> [RecordKey: [String: String]] {
        try locked { db in
            var out: [RecordKey: [String: String]] = [:]
            for (key, folder, name) in try db.query("SELECT device, path, folder, name FROM remote_names", row: {
                (RecordKey(device: $0.string(0) ?? "", path: $0.string(1) ?? ""), $0.string(2) ?? "", $0.string(3) ?? "")
            }) { out[key, default: [:]][folder] = name }
            return out
        }
    }

    /// A content's block list, when it was fetched before.
    func blockList(of content: SHA256Digest) throws -> [SHA256Digest]? {
        try locked { db in
            guard let bytes = try db.queryOne("SELECT blocks FROM remote_contents WHERE content = ?", content.hex, row: { $0.bytes(0) }) ?? nil,
                  bytes.count % 32 == 0 else { return nil }
            return stride(from: 0, to: bytes.count, by: 32).map { SHA256Digest(bytes: Array(bytes[$0..<($0 + 32)])) }
        }
    }

    func saveBlockList(_ blocks: [SHA256Digest], of content: SHA256Digest, size: Int64) throws {
        try locked { db in
            _ = try db.run("INSERT OR REPLACE INTO remote_contents(content, size, blocks) VALUES (?, ?, ?)",
                           content.hex, size, blocks.flatMap(\.bytes))
        }
    }
}
