import Crypto
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The folder store's blocks that came in block packs: their bytes one after the other in
/// pack files (`blobs/packs/<n>.pack`, Storage's `PackFile`), and where each is in an
/// index beside them (`blobs/packs/index.db`, SQLite: hash → pack, offset, length).
///
/// Why not a file per block, as blocks sent one by one are: 10,000 small files from a
/// device were 10,000 staging files created on the connection's thread, 10,000 renames
/// and 10,000 inodes; creating them was a tenth of the server's CPU in the bulk row, and
/// on a disk that had just freed many inodes more than half of it, while every other
/// connection waited (Docs/benchmarks.md, "The server's pack files"). A pack of one-byte
/// records would have been 450,000 files. Appended here, a pack costs one `fdatasync` and
/// one transaction of the index.
///
/// One pack file per server: server processes that share a data folder (on one
/// PostgreSQL) each append to a pack file of their own, held with `flock` while they run
/// (`takePackForWriting`); a collection or a snapshot only reads and punches.
///
/// Order, and why a kill loses nothing (Docs/architecture.md, "The server's pack files"):
/// a pack's records are written into ranges reserved at the end of the server's pack
/// file; at its commit the file is made durable, then the index rows are committed
/// (synchronous=FULL: durable before the records' transaction that follows names the
/// blocks), then the records. A kill before the index leaves bytes no row names: at the
/// end, cut when a server takes the file again (`cutTail`); a range a writer gave up is
/// punched at once. A kill between the index and the records leaves indexed blocks
/// without their records' rows: found as any unrecorded block is
/// (`FolderBlocks.unrecorded`), checked and recorded. A removed block's row goes first,
/// its range is punched after: a reader holding the old range reads zeros, which fail
/// the hash check every reader makes.
///
/// Thread safety: the index has two connections (WAL): lookups on one, changes on the
/// other, each behind its own lock, so a lookup on a connection's thread never waits
/// for a commit's fsync.
final class PackedBlocks: Sendable {
    let folder: String
    private let reader: Mutex<Database>
    private let writer: Mutex<Database>
    /// Pack files opened so far, by number.
    private let opened = Mutex<[Int: PackFile]>([:])
    /// The pack file this server appends to, and the descriptor holding its lock (`takePackForWriting`).
    private let writing = Mutex<(number: Int, file: PackFile)?>(nil)
    private let lockDescriptor = Mutex<Int32?>(nil)

    /// The index under `root` (the store's folder), created when missing.
    init(root: String) throws {
        folder = root + "/packs"
        try FileIO.makeDirectories(folder)
        let path = folder + "/index.db"
        if let fd = try? FileIO.open(path, O_WRONLY | O_CREAT, 0o600) { FileIO.close(fd) }
        let w = try Database(path: path)
        try w.execute("""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS packed(hash BLOB PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID;
            """)
        let r = try Database(path: path, options: .init(readOnly: true, create: false))
        writer = Mutex(w)
        reader = Mutex(r)
    }

    /// Where a block's bytes are in the pack files.
    struct Range: Equatable {
        let pack: Int
        let offset: Int64
        let length: Int
    }

    /// Where a block's bytes are, nil when it is not in a pack file.
    func range(_ digest: SHA256Digest) throws -> Range? {
        try reader.withLock { db in
            try db.queryOne("SELECT pack, offset, length FROM packed WHERE hash = ?", digest.bytes) { Range(pack: $0.int(0), offset: $0.int64(1), length: $0.int(2)) }
        }
    }

    /// Pack file `number`, opened once.
    func file(_ number: Int) throws -> PackFile {
        if let file = opened.withLock({ $0[number] }) { return file }
        // Writable: a collection punches the ranges of blocks it removes.
        let file = try PackFile(path: Self.path(folder, number), writable: true)
        return opened.withLock { files in
            if let first = files[number] { return first }
            files[number] = file
            return file
        }
    }

    /// A block's `length` bytes.
    func read(_ range: Range) throws -> [UInt8] { try file(range.pack).read(at: range.offset, length: range.length) }

    /// The pack file this server appends to; throws when it took none.
    func appending() throws -> (number: Int, file: PackFile) {
        guard let w = writing.withLock({ $0 }) else { throw PackNotTaken(folder: folder) }
        return w
    }

    /// Makes the appended bytes durable, then indexes `blocks` (in the pack file this
    /// server appends to) in one durable transaction. Returns the positions of the
    /// blocks that were indexed already (by another writer meanwhile): their new ranges
    /// are not named, and the caller releases them.
    func index(_ blocks: [(digest: SHA256Digest, offset: Int64, length: Int)]) throws -> Set<Int> {
        let (number, file) = try appending()
        try file.sync()
        return try writer.withLock { db in
            try db.transaction {
                var taken = Set<Int>()
                for (i, b) in blocks.enumerated() {
                    let n = try db.run("INSERT INTO packed(hash, pack, offset, length) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", b.digest.bytes, number, b.offset, b.length)
                    if n == 0 { taken.insert(i) }
                }
                return taken
            }
        }
    }

    /// Drops a block's row, then frees its range; false when it was not in a pack file.
    @discardableResult
    func remove(_ digest: SHA256Digest) throws -> Bool {
        let range = try writer.withLock { db in
            try db.transaction {
                try db.queryOne("DELETE FROM packed WHERE hash = ? RETURNING pack, offset, length", digest.bytes) { Range(pack: $0.int(0), offset: $0.int64(1), length: $0.int(2)) }
            }
        }
        guard let range else { return false }
        release(range)
        return true
    }

    /// Frees a range no row names; a failure only costs space, and is logged.
    func release(_ range: Range) {
        do { try file(range.pack).release(at: range.offset, length: range.length) } catch {
            ServerLog.note("freeing \(range.length) bytes at \(range.offset) of \(Self.path(folder, range.pack)) failed: \(error); the space stays used")
        }
    }

    /// Takes a pack file for this server's appends, before it receives any pack: the
    /// first no other server holds (its `flock`, held until this store is closed), else a
    /// new one. Cuts off what a kill left at its end (bytes after the last block it indexes).
    func takePackForWriting() throws {
        if writing.withLock({ $0 != nil }) { return }
        let numbers = ((try? FileIO.listDirectory(folder)) ?? []).compactMap(Self.number(of:)).sorted()
        // A few new numbers: servers starting together may make the same new file, and one of them takes it.
        let next = (numbers.last ?? 0) + 1
        for number in numbers + Array(next..<next + 8) {
            let path = Self.path(folder, number)
            let lock = try FileIO.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
                FileIO.close(lock)
                continue
            }
            do {
                let file = try self.file(number)
                let end = try reader.withLock { db in
                    try db.queryOne("SELECT COALESCE(MAX(offset + length), 0) FROM packed WHERE pack = ?", number) { $0.int64(0) } ?? 0
                }
                try file.cutTail(keeping: end)
                writing.withLock { $0 = (number, file) }
                lockDescriptor.withLock { $0 = lock }
                return
            } catch {
                FileIO.close(lock)
                throw error
            }
        }
        throw PackNotTaken(folder: folder)
    }

    deinit {
        if let lock = lockDescriptor.withLock({ $0 }) { FileIO.close(lock) }
    }

    static func path(_ folder: String, _ number: Int) -> String { "\(folder)/\(number).pack" }

    static func number(of name: String) -> Int? {
        guard name.hasSuffix(".pack"), let n = Int(name.dropLast(5)), n > 0 else { return nil }
        return n
    }
}

/// Blocks in a pack came to a server that took no pack file to append to.
struct PackNotTaken: Error, CustomStringConvertible {
    let folder: String
    var description: String { "no pack file of \(folder) could be taken for this server's writes; check the folder's permissions and free space" }
}
