import Crypto
import Protocol
import Storage

/// Upload rows: one per block being uploaded (unique by block hash), with the offset
/// received so far. Everything an upload's progress needs is in its row and its
/// staging file, so any server process that shares the records and the data folder
/// can continue it (Docs/architecture.md, "What a server process keeps").
extension Metadata {
    func upload(id: String) throws -> UploadRow? {
        try withSession { try $0.queryOne("SELECT \(UploadRow.columns) FROM uploads WHERE id = ?", id, row: UploadRow.from) }
    }

    /// The one upload of block `hash`, made if there is none (completed at once when
    /// `present`), its expiry pushed out to at least `expires`. Returns it and whether
    /// it was made. An upload of the same hash with another length is a 409 naming `field`.
    func findOrCreateUpload(hash: String, size: Int64, deviceID: Int64, present: Bool, now: Int64, expires: Int64, field: String) throws -> (UploadRow, Bool) {
        try withSession { db in
            try db.transaction {
                if let row = try db.queryOne("SELECT \(UploadRow.columns) FROM uploads WHERE hash = ?", hash, row: UploadRow.from) {
                    guard row.length == size else {
                        throw RequestFailure(409, "size_conflict", "an upload of block \(hash) with \(row.length) bytes exists, not \(size); check the size you send", field: field)
                    }
                    if row.expiresAt < expires { try db.run("UPDATE uploads SET expires_at = ? WHERE id = ?", expires, row.id) }
                    return (UploadRow(id: row.id, hash: row.hash, length: row.length, received: row.received, expiresAt: max(row.expiresAt, expires), completed: row.completed), false)
                }
                let id = Hex.encode(SecureRandom.bytes(16))
                try db.run("INSERT INTO uploads(id, hash, length, received, expires_at, created_at, device_id, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           id, hash, size, present ? size : 0, expires, now, deviceID, present ? Optional(now) : nil)
                return (UploadRow(id: id, hash: hash, length: size, received: present ? size : 0, expiresAt: expires, completed: present), true)
            }
        }
    }

    func deleteUpload(id: String) throws {
        try withSession { try $0.run("DELETE FROM uploads WHERE id = ?", id) }
    }

    /// Moves an upload's offset from `from` to `to`. False when the row's offset was not
    /// `from` (another server process moved it first: the caller's PATCH lost the race
    /// and its client resumes from the stored offset) or the upload is complete.
    @discardableResult
    func setReceived(id: String, from: Int64?, to received: Int64) throws -> Bool {
        try withSession { db in
            if let from {
                return try db.run("UPDATE uploads SET received = ? WHERE id = ? AND received = ? AND completed_at IS NULL", received, id, from) == 1
            }
            return try db.run("UPDATE uploads SET received = ? WHERE id = ? AND completed_at IS NULL", received, id) == 1
        }
    }

    /// Every upload row (recovery after an unclean stop).
    func allUploads() throws -> [UploadRow] {
        try withSession { try $0.query("SELECT \(UploadRow.columns) FROM uploads", row: UploadRow.from) }
    }

    func expiredUploadIDs(now: Int64) throws -> [String] {
        try withSession { try $0.query("SELECT id FROM uploads WHERE expires_at < ?", now) { $0.string(0) ?? "" } }
    }

    /// Deletes an upload if it is still expired (another device may have renewed it since).
    func deleteExpiredUpload(id: String, now: Int64) throws {
        try withSession { try $0.run("DELETE FROM uploads WHERE id = ? AND expires_at < ?", id, now) }
    }
}

/// An upload row.
struct UploadRow: Sendable {
    let id: String
    let hash: String
    let length: Int64
    let received: Int64
    let expiresAt: Int64
    let completed: Bool

    static let columns = "id, hash, length, received, expires_at, CASE WHEN completed_at IS NULL THEN 0 ELSE 1 END"
    static func from(_ row: any RecordRow) -> UploadRow {
        UploadRow(id: row.string(0) ?? "", hash: row.string(1) ?? "", length: row.int64(2),
                  received: row.int64(3), expiresAt: row.int64(4), completed: row.int(5) != 0)
    }
}
