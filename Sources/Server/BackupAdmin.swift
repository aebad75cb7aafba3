import Crypto
import Protocol
import Storage

/// Deleting backups, for `vdrive serve backup delete`: the only way a version goes.
/// Works on the data folder's database directly, like `DeviceRegistry` (also while
/// the server runs: SQLite WAL allows it, PostgreSQL is shared; each deletion is one transaction).
///
/// Only records go. Contents and blocks stay in the store, downloadable by hash, until
/// the garbage collection (SpaceCollector.swift) removes what nothing names after its
/// grace period: a device may be about to record a file relying on them.
public struct BackupAdmin: Sendable {
    /// One version, as `delete` reports it.
    public struct Version: Sendable, Equatable {
        public let device: String
        public let path: String
        public let hash: String
        public let size: Int64
        public let sequence: Int64
        public let recordedAt: Int64?
        public let isCurrent: Bool
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        case unknownDevice(String)
        case noSuchPath(device: String, path: String)
        case noSuchVersion(device: String, path: String, hash: String)
        case badPath(String)

        public var description: String {
            switch self {
            case .unknownDevice(let d): return "no device named '\(d)'; 'vdrive serve device list' shows them"
            case .noSuchPath(let d, let p): return "device '\(d)' has no backup of '\(p)'"
            case .noSuchVersion(let d, let p, let h): return "device '\(d)' has no version \(h) of '\(p)'"
            case .badPath(let m): return m
            }
        }
    }

    private let metadata: Metadata

    public init(dataDirectory: String, database: DatabaseLocation? = nil) throws(ServerError) {
        let configuration = ServerConfiguration(dataDirectory: dataDirectory, database: database)
        do { try FileIO.makeDirectories(configuration.blobRoot) } catch let e as Errno { throw .dataFolder(configuration.blobRoot, e) } catch { throw .dataFolder(configuration.blobRoot, .ioError) }
        metadata = try Metadata(location: configuration.records, blobRoot: configuration.blobRoot)
    }

    /// The versions `delete` would remove: every version of (device, path), or the one
    /// whose content hash is `version`. Changes nothing.
    public func versions(device: String, path: String, version: String? = nil) throws -> [Version] {
        try metadata.withSession { db in try select(device: device, path: path, version: version, in: db) }
    }

    /// Deletes those versions in one transaction and returns them. When the current
    /// version goes and older ones stay, the newest remaining one is current (it is
    /// the one with the highest sequence).
    /// Each deleted version is an entry of the change feed (`deletions` of
    /// `GET /v1/changes`), so followers drop it too.
    @discardableResult
    public func delete(device: String, path: String, version: String? = nil) throws -> [Version] {
        try metadata.withSession { db in
            try db.transaction {
                let doomed = try select(device: device, path: path, version: version, in: db)
                // Sequences are never reused: a feed reader may be past the highest one.
                try FileVersions.setSequenceFloor(try FileVersions.nextSequence(in: db) - 1, in: db)
                try FileVersions.delete(sequences: doomed.map(\.sequence), now: ServerContext.now(), in: db)
                return doomed
            }
        }
    }

    private static func checked(path: String, version: String?) -> Result<(String, String?), Failure> {
        do {
            let valid = try Validation.path(path)
            let hash = try version.map { v throws(ValidationError) in try Validation.hash(v, field: "--version").hex }
            return .success((valid, hash))
        } catch {
            return .failure(.badPath(error.message))
        }
    }

    private func select(device: String, path rawPath: String, version: String?, in db: any RecordSession) throws -> [Version] {
        let (path, hash) = try Self.checked(path: rawPath, version: version).get()
        guard try db.queryOne("SELECT 1 FROM devices WHERE name = ?", device, row: { _ in true }) != nil else { throw Failure.unknownDevice(device) }
        let rows = try db.query("""
            SELECT d.name, v.path, v.hash, v.size, v.sequence, v.recorded_at
            FROM file_versions v JOIN devices d ON d.id = v.device_id
            WHERE d.name = ? AND v.path = ? ORDER BY v.sequence
            """, device, path) {
            Version(device: $0.string(0) ?? "", path: $0.string(1) ?? "", hash: $0.string(2) ?? "", size: $0.int64(3), sequence: $0.int64(4),
                    recordedAt: $0.optionalInt64(5), isCurrent: false)
        }
        // The current version is the newest (the last by sequence).
        let all = rows.enumerated().map { i, v in
            Version(device: v.device, path: v.path, hash: v.hash, size: v.size, sequence: v.sequence, recordedAt: v.recordedAt, isCurrent: i == rows.count - 1)
        }
        if all.isEmpty { throw Failure.noSuchPath(device: device, path: path) }
        guard let hash else { return all }
        let chosen = all.filter { $0.hash == hash }
        if chosen.isEmpty { throw Failure.noSuchVersion(device: device, path: path, hash: hash) }
        return chosen
    }
}
