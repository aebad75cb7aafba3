import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive serve check`, space part: the bytes the workspace's blocks take (what the
/// quota counts, as `vdrive serve usage` totals them), the quota (the one given, else
/// the one the server last started with) and whether the workspace is over it. Being
/// over is reported, not a problem: the server starts, and refuses new bytes with 507.
/// Reads only; a database not created or not migrated yet has no usage to report.
public enum SpaceCheck {
    public static func run(_ location: DatabaseLocation, quota given: Int64?) -> RecordsCheck.Report {
        var report = RecordsCheck.Report()
        if case .sqlite(let path) = location, access(path, F_OK) != 0 {
            report.lines.append("usage: no records yet")
            given.map { report.lines.append("quota: \(SpaceUsage.text($0)) (--quota); nothing stored yet") }
            return report
        }
        let stored: (blocks: Int64, bytes: Int64), recorded: Int64?
        do {
            let store = try Metadata.open(location)
            stored = try store.withSession { db in
                try db.queryOne("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blocks") { ($0.int64(0), $0.int64(1)) } ?? (0, 0)
            }
            recorded = try store.withSession { db in
                try db.queryOne("SELECT value FROM settings WHERE key = ?", Metadata.quotaKey) { $0.bytes(0).flatMap { Int64(String(decoding: $0, as: UTF8.self)) } } ?? nil
            }
        } catch {
            report.lines.append("usage: unknown: the records have no blocks yet (\(error))")
            return report
        }
        report.lines.append("usage: \(stored.blocks) block(s), \(SpaceUsage.text(stored.bytes)) stored")
        guard let quota = given ?? recorded else {
            report.lines.append("quota: none")
            return report
        }
        let source = given != nil ? "--quota" : "the quota the server last started with"
        report.lines.append("quota: \(SpaceUsage.text(quota)) (\(source))")
        if stored.bytes > quota {
            report.lines.append("quota: over by \(SpaceUsage.text(stored.bytes - quota)): uploads of new content get 507 until space is freed (vdrive serve backup delete, then gc) or the quota is raised")
        } else {
            let percent = quota > 0 ? Double(stored.bytes) / Double(quota) * 100 : 0
            report.lines.append("quota: within, \(String(format: "%.1f", percent))% used, \(SpaceUsage.text(quota - stored.bytes)) free")
        }
        return report
    }
}
