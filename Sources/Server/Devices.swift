import Crypto
import Storage

/// Device administration for `vdrive serve device …`: works on the data folder's
/// database directly (also while the server runs: SQLite WAL allows it).
public struct DeviceRegistry: Sendable {
    public struct Entry: Sendable, Equatable {
        public let name: String
        public let createdAt: Int64
        public let revokedAt: Int64?
        public let watermarkSequence: Int64?
    }

    public enum Failure: Error, CustomStringConvertible, Equatable {
        case exists(String)
        case unknown(String)
        case badName(String)
        public var description: String {
            switch self {
            case .exists(let n): return "device '\(n)' already has a token; revoke it first ('vdrive serve device revoke \(n)') to issue a new one"
            case .unknown(let n): return "no device named '\(n)'; 'vdrive serve device list' shows them"
            case .badName(let n): return "device name '\(n)' must be 1-64 letters, digits, '.', '_' or '-'"
            }
        }
    }

    private let metadata: Metadata

    public init(dataDirectory: String, database: DatabaseLocation? = nil) throws(ServerError) {
        do { try FileIO.makeDirectories(dataDirectory) } catch let e as Errno { throw .dataFolder(dataDirectory, e) } catch { throw .dataFolder(dataDirectory, .ioError) }
        DataFolderModes.secure(dataDirectory).forEach { ServerLog.note($0) }
        let configuration = ServerConfiguration(dataDirectory: dataDirectory, database: database)
        do { try FileIO.makeDirectories(configuration.blobRoot) } catch let e as Errno { throw .dataFolder(configuration.blobRoot, e) } catch { throw .dataFolder(configuration.blobRoot, .ioError) }
        metadata = try Metadata(location: configuration.records, blobRoot: configuration.blobRoot)
    }

    /// Makes a device (or re-issues the token of a revoked one, keeping its watermark)
    /// and returns its token. The token is stored only as its SHA-256.
    public func add(_ name: String) throws -> String {
        let allowed = name.utf8.allSatisfy { c in
            (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 46 || c == 95 || c == 45
        }
        guard !name.isEmpty, name.utf8.count <= 64, allowed else { throw Failure.badName(name) }
        let token = "vdt_" + Hex.encode(SecureRandom.bytes(32))
        let hash = Metadata.tokenHash(token)
        let now = Int64(time(nil))
        try metadata.withSession { db in
            try db.transaction {
                if let revoked = try db.queryOne("SELECT revoked_at FROM devices WHERE name = ?", name, row: { $0.isNull(0) ? nil : Optional($0.int64(0)) }) {
                    guard revoked != nil else { throw Failure.exists(name) }
                    try db.run("UPDATE devices SET token_hash = ?, revoked_at = NULL WHERE name = ?", hash, name)
                } else {
                    try db.run("INSERT INTO devices(name, token_hash, created_at) VALUES (?, ?, ?)", name, hash, now)
                }
            }
        }
        return token
    }

    public func list() throws -> [Entry] {
        try metadata.withSession { db in
            try db.query("SELECT name, created_at, revoked_at, watermark_sequence FROM devices ORDER BY name") {
                Entry(name: $0.string(0) ?? "", createdAt: $0.int64(1), revokedAt: $0.isNull(2) ? nil : $0.int64(2),
                      watermarkSequence: $0.isNull(3) ? nil : $0.int64(3))
            }
        }
    }

    /// Revokes a device's token at once: its next request gets 401, and its presigned
    /// upload URLs 403 (both naming the revocation). The token's hash is kept so the
    /// server can tell a revoked token from an unknown one; it never authenticates again.
    public func revoke(_ name: String) throws {
        let changed = try metadata.withSession { db in
            try db.run("UPDATE devices SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL", Int64(time(nil)), name)
        }
        if changed == 0 { throw Failure.unknown(name) }
    }
}
#if canImport(Glibc)
import Glibc
#endif
