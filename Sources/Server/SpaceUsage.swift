import Foundation
import Storage

/// `vdrive serve usage`: what each device's backups take, the workspace's total, and
/// what a garbage collection would free now. Read-only; runs beside a server.
public struct SpaceUsage: Sendable, Equatable, Codable {
    public struct Device: Sendable, Equatable, Codable {
        public var name: String
        /// Paths with a current version.
        public var files: Int64
        /// Every version kept (current and older).
        public var versions: Int64
        /// The bytes of the distinct blocks its versions use.
        public var referencedBytes: Int64
        /// The bytes of the blocks no other device's versions use: what deleting all of
        /// this device's backups would free (after a collection).
        public var uniqueBytes: Int64
    }

    public var devices: [Device]
    /// Blocks stored and their bytes (what the quota counts).
    public var blocks: Int64
    public var storedBytes: Int64
    public var quota: Int64?
    /// What a collection with `grace` would remove now.
    public var collectableBlocks: Int64
    public var collectableBytes: Int64
    public var grace: Int64

    /// Reads the usage of the records `collector` works on.
    public static func measure(_ collector: SpaceCollector, grace: Int64, quota: Int64?, now: Int64 = Int64(time(nil))) throws -> SpaceUsage {
        let perDevice = try collector.metadata.withSession { db -> [Device] in
            let names = try db.query("SELECT id, name FROM devices ORDER BY name") { ($0.int64(0), $0.string(1) ?? "") }
            let counts = Dictionary(try db.query("""
                SELECT device_id, COUNT(DISTINCT path), COUNT(*) FROM file_versions GROUP BY device_id
                """) { ($0.int64(0), ($0.int64(1), $0.int64(2))) }, uniquingKeysWith: { a, _ in a })
            // Each device's distinct blocks; a block with one device is unique to it.
            let deviceBlocks = "SELECT DISTINCT v.device_id AS device, cb.block AS block FROM file_versions v JOIN content_blocks cb ON cb.content = v.hash"
            let referenced = Dictionary(try db.query("""
                SELECT db.device, SUM(b.size) FROM (\(deviceBlocks)) db JOIN blocks b ON b.hash = db.block GROUP BY db.device
                """) { ($0.int64(0), $0.int64(1)) }, uniquingKeysWith: { a, _ in a })
            let unique = Dictionary(try db.query("""
                SELECT one.device, SUM(b.size) FROM
                    (SELECT block, MIN(device) AS device FROM (\(deviceBlocks)) db GROUP BY block HAVING COUNT(*) = 1) one
                JOIN blocks b ON b.hash = one.block GROUP BY one.device
                """) { ($0.int64(0), $0.int64(1)) }, uniquingKeysWith: { a, _ in a })
            return names.map { id, name in
                Device(name: name, files: counts[id]?.0 ?? 0, versions: counts[id]?.1 ?? 0,
                       referencedBytes: referenced[id] ?? 0, uniqueBytes: unique[id] ?? 0)
            }
        }
        let totals = try collector.metadata.withSession { db in
            try db.queryOne("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blocks") { ($0.int64(0), $0.int64(1)) } ?? (0, 0)
        }
        let (count, bytes) = try collector.forecast(cutoff: SpaceCollector.cutoff(now: now, grace: grace))
        return SpaceUsage(devices: perDevice, blocks: totals.0, storedBytes: totals.1, quota: quota,
                          collectableBlocks: Int64(count), collectableBytes: bytes, grace: grace)
    }

    /// The bytes of every stored block (what the quota counts).
    static func storedBytes(_ metadata: Metadata) throws -> Int64 {
        try metadata.withSession { db in try db.queryOne("SELECT COALESCE(SUM(size), 0) FROM blocks") { $0.int64(0) } ?? 0 }
    }

    /// Bytes for people, in decimal units: "1.2 GB".
    public static func text(_ bytes: Int64) -> String {
        let units = ["bytes", "KB", "MB", "GB", "TB", "PB", "EB"]
        var value = Double(max(bytes, 0)), unit = 0
        while value >= 1000 && unit < units.count - 1 { value /= 1000; unit += 1 }
        return unit == 0 ? "\(bytes) bytes" : String(format: value >= 100 ? "%.0f" : "%.1f", value) + " " + units[unit]
    }
}
