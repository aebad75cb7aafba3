import Protocol
import Storage

/// The workspace quota (`vdrive serve --quota`): the bytes of its blocks may not grow
/// past it. An upload plan, a tus creation or a whole-block PUT that would take the
/// workspace over gets 507 `quota_exceeded` saying how much is used, the quota, and what
/// to do; linking content the workspace already holds costs nothing and is always
/// allowed. What counts is every stored block once (dedup saves quota), the sum
/// `vdrive serve usage` prints as "stored".
extension ServerContext {
    /// Refuses (507) when `adding` more bytes would take the workspace over its quota.
    func checkQuota(adding: Int64) throws {
        guard let quota = configuration.quota, adding > 0 else { return }
        let used = try usedBytesNow()
        // Compared without adding: `adding` is a sum of client-declared sizes.
        guard used > quota || adding > quota - used else { return }
        throw RequestFailure(Self.quotaExceeded(used: used, quota: quota, needed: adding))
    }

    /// Runs `record` (which records a block of `bytes`) with those bytes held against the
    /// quota: 507 when they do not fit beside what is stored and what other blocks being
    /// recorded hold. Plans are checked against a count up to a second old; this check
    /// at the last byte is what keeps concurrent uploads that each fitted from passing it
    /// together (within one server process; see Docs/operations.md for several).
    func recordingWithinQuota<T>(_ bytes: Int64, _ record: () throws -> T) throws -> T {
        guard let quota = configuration.quota, bytes > 0 else { return try record() }
        try quotaReserved.withLock { (reserved: inout Int64) throws -> Void in
            let (taken, overflow) = try usedBytesNow().addingReportingOverflow(reserved)
            guard !overflow, taken <= quota, bytes <= quota - taken else {
                throw RequestFailure(Self.quotaExceeded(used: taken, quota: quota, needed: bytes))
            }
            reserved += bytes
        }
        defer { quotaReserved.withLock { $0 -= bytes } }
        return try record()
    }

    /// The bytes of every stored block, counted again when the last count is a second old
    /// (a plan's check is one indexed sum, not a scan per block).
    func usedBytesNow() throws -> Int64 {
        let now = Self.now()
        if let last = usedBytes.withLock({ $0 }), now - last.at < 1 { return last.bytes }
        let bytes = try SpaceUsage.storedBytes(metadata)
        usedBytes.withLock { $0 = (bytes, now) }
        return bytes
    }

    static func quotaExceeded(used: Int64, quota: Int64, needed: Int64) -> HTTPResponse {
        .json(507, ErrorResponse(error: "quota_exceeded",
                                 message: "the workspace is full: \(SpaceUsage.text(used)) used of its \(SpaceUsage.text(quota)) quota, and this upload needs \(SpaceUsage.text(needed)) more; "
                                     + "content the workspace already holds can still be recorded. Its administrator can free space (vdrive serve backup delete, then vdrive serve gc) or raise --quota",
                                 used: used, quota: quota))
    }
}

extension Metadata {
    static let quotaKey = "quota"

    /// The quota the server last started with (nil: none), kept in `settings` so that
    /// `vdrive serve usage` and `check` can report it.
    func recordedQuota() throws -> Int64? {
        try withSession { db in
            try db.queryOne("SELECT value FROM settings WHERE key = ?", Self.quotaKey) { $0.bytes(0).flatMap { Int64(String(decoding: $0, as: UTF8.self)) } } ?? nil
        }
    }

    func recordQuota(_ quota: Int64?) throws {
        try withSession { db in
            if let quota {
                try db.run("INSERT INTO settings(key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", Self.quotaKey, Array(String(quota).utf8))
            } else {
                try db.run("DELETE FROM settings WHERE key = ?", Self.quotaKey)
            }
        }
    }
}

extension SpaceCollector {
    /// The quota the workspace's server last started with.
    public func recordedQuota() throws -> Int64? { try metadata.recordedQuota() }
}
