import Foundation
import Crypto
import Storage

/// Whether the block store holds what the catalog says it holds: every block a row
/// names is here (a file, or bytes in the small blocks' pack) and hashes to its name.
///
/// One piece of code for two callers: the mount's check after an unclean stop (only
/// the blocks newer than the last durable point: `newerThan`) and `vdrive check` on an
/// unmounted state folder (all of them). It reads and hashes; it changes nothing. What
/// the caller does with a finding is its own: the mount marks the block damaged (its
/// reads are fetched again from the server, or fail with EIO), the command reports it.
public enum BlockAudit {
    public enum Problem: String, Sendable {
        /// A resident block with no file here and no bytes in the catalog.
        case missing
        /// Its file (or its bytes in the catalog) does not hash to its name, or has
        /// another length than its row says.
        case wrongBytes = "wrong bytes"
        /// Marked damaged by an earlier check or read: its reads are fetched again from
        /// the server when it has them, else fail with EIO.
        case markedDamaged = "marked damaged"
        /// A file names a block that has no row at all (the catalog contradicts itself).
        case noRow = "no row"
    }

    public struct Finding: Sendable, Equatable {
        public let digest: SHA256Digest
        public let problem: Problem
    }

    public struct Report: Sendable {
        /// Blocks whose bytes were read and hashed, and their bytes.
        public var checked = 0
        public var checkedBytes: Int64 = 0
        /// Blocks files name that only the server holds (optimize storage): not here by design.
        public var onlineOnly = 0
        public var findings: [Finding] = []
        /// Block files no row names: space only (a kill between a commit and a removal,
        /// or before a commit); the mount after an unclean stop removes them.
        public var unnamedFiles: [SHA256Digest] = []
        public var isSound: Bool { findings.isEmpty }
    }

    /// Checks the blocks of the catalog `db` against `blobs`. `newerThan`: only blocks
    /// stored by commits above that generation and not damaged yet (the after-crash
    /// check); nil: every
    /// block, and the files no row names. `progress` is told each block's bytes.
    /// `pack`: the small blocks' pack beside the catalog (`PackFile.path(besideCatalog:)`).
    /// A catalog from before the pack (its small blocks' bytes still in `inline_blocks`,
    /// moved at its next mount) is read as it is.
    public static func run(_ db: Database, blobs: BlobStore, pack: PackFile?, newerThan generation: Int64? = nil,
                           progress: ((Int64) -> Void)? = nil) throws -> Report {
        var report = Report()
        let layout = try SmallBlocks(db)
        // Packed bytes are checked after an unclean stop as block files are (the pack is
        // synced by the flusher, not by SQLite); bytes still in the catalog are as safe as
        // its transactions.
        let rows = try db.query("""
            SELECT b.hash, b.size, b.damaged, \(layout.placeColumn) FROM blocks b \(layout.join)
            WHERE b.resident = 1 AND b.gen > ? AND (? OR (b.damaged = 0 AND \(layout.checkedAfterCrash)))
            """, generation ?? Int64.min, generation == nil) { row in
            (SHA256Digest(hex: row.string(0) ?? ""), row.int64(1), row.int(2) != 0, row.isNull(3) ? nil : row.int64(3))
        }
        for (digest, size, damaged, place) in rows {
            guard let digest else { continue }
            if damaged {
                report.findings.append(Finding(digest: digest, problem: .markedDamaged))
                continue
            }
            let problem: Problem?
            if let place {
                let bytes: [UInt8]?
                if layout == .inCatalog {
                    bytes = try db.queryOne("SELECT data FROM inline_blocks WHERE hash = ?", digest.hex) { $0.bytes(0) ?? [] }
                } else if let pack, size >= 0, size <= Int64(Int32.max) {
                    bytes = try? pack.read(at: place, length: Int(size))
                } else {
                    bytes = nil
                }
                if let bytes {
                    problem = bytes.count == size && SHA256Hasher.digest(bytes) == digest ? nil : .wrongBytes
                } else {
                    problem = .missing
                }
            } else {
                problem = check(file: blobs.path(for: digest), digest, size: size)
            }
            if let problem { report.findings.append(Finding(digest: digest, problem: problem)) }
            report.checked += 1
            report.checkedBytes += size
            progress?(size)
        }
        guard generation == nil else { return report }
        report.onlineOnly = try db.queryOne("""
            SELECT count(DISTINCT f.hash) FROM file_blocks f JOIN blocks b ON b.hash = f.hash WHERE b.resident = 0
            """) { $0.int(0) } ?? 0
        for hex in try db.query("""
            SELECT DISTINCT f.hash FROM file_blocks f WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE b.hash = f.hash)
            """, row: { $0.string(0) ?? "" }) {
            if let d = SHA256Digest(hex: hex) { report.findings.append(Finding(digest: d, problem: .noRow)) }
        }
        // A packed block may also have a file (a photo's block saved again
        // as a small file elsewhere): its row still names that file, which goes with it.
        let held = Set(try db.query("SELECT hash FROM blocks WHERE resident = 1") { $0.string(0) ?? "" })
        report.unnamedFiles = try blobs.allDigests().filter { !held.contains($0.hex) }
        return report
    }

    /// nil when the file at `path` has `size` bytes that hash to `digest`.
    private static func check(file path: String, _ digest: SHA256Digest, size: Int64) -> Problem? {
        let fd: Int32
        do { fd = try FileIO.open(path, O_RDONLY) } catch { return .missing }
        defer { FileIO.close(fd) }
        guard let st = try? FileIO.status(fd), Int64(st.st_size) == size else { return .wrongBytes }
        return (try? BlobStore.hash(fd: fd)) == digest ? nil : .wrongBytes
    }

    /// The paths of the files that name `digest` (for reports).
    public static func paths(using digest: SHA256Digest, in db: Database) throws -> [String] {
        try db.query("SELECT DISTINCT ino FROM file_blocks WHERE hash = ?", digest.hex) { UInt64($0.int64(0)) }
            .compactMap { try Catalog.path(of: $0, in: db) }
    }
}

/// Where a catalog keeps its small blocks' bytes, by its age: `vdrive check` reads a
/// catalog as it finds it, before a mount has moved it on.
enum SmallBlocks: Equatable {
    /// In the catalog itself, `inline_blocks` (drive-005 to drive-007).
    case inCatalog
    /// In the pack, placed by rows of `packed_blocks` (drive-008).
    case packedTable
    /// In the pack, placed by the block's row, `blocks.pack_offset` (drive-009 on).
    case packedColumn

    init(_ db: Database) throws {
        if try Catalog.hasTable("inline_blocks", in: db) {
            self = .inCatalog
        } else if try Catalog.hasTable("packed_blocks", in: db) {
            self = .packedTable
        } else {
            self = .packedColumn
        }
    }

    /// A column of the audit's row: non-null for a small block (its place in the pack,
    /// or 0 for bytes in the catalog).
    var placeColumn: String {
        switch self {
        case .inCatalog: return "CASE WHEN i.hash IS NULL THEN NULL ELSE 0 END"
        case .packedTable: return "i.pack_offset"
        case .packedColumn: return "b.pack_offset"
        }
    }

    var join: String {
        switch self {
        case .inCatalog: return "LEFT JOIN inline_blocks i ON i.hash = b.hash"
        case .packedTable: return "LEFT JOIN packed_blocks i ON i.hash = b.hash"
        case .packedColumn: return ""
        }
    }

    /// Which sound blocks the check after an unclean stop reads: not bytes in the catalog.
    var checkedAfterCrash: String { self == .inCatalog ? "i.hash IS NULL" : "1" }
}
