import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// `server-002-blocks` on a data folder made by the server before blocks: the schema
/// and rows written with that version's SQL, blobs as it stored them (one file per
/// file, named by `sha256sum`).
@Suite(.tags(.logic)) struct MigrationTests {
    /// The schema of `server-001-initial` exactly as it shipped (a fixture: never edit).
    static let oldSchema = """
    CREATE TABLE settings (key TEXT PRIMARY KEY, value BLOB NOT NULL);
    CREATE TABLE devices (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        token_hash TEXT UNIQUE,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER,
        watermark_sequence INTEGER,
        watermark_capture_date INTEGER,
        watermark_updated_at INTEGER
    );
    CREATE TABLE blobs (hash TEXT PRIMARY KEY, size INTEGER NOT NULL, created_at INTEGER NOT NULL) WITHOUT ROWID;
    CREATE TABLE uploads (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        length INTEGER NOT NULL,
        received INTEGER NOT NULL DEFAULT 0,
        expires_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        device_id INTEGER,
        completed_at INTEGER
    );
    CREATE TABLE files (
        path TEXT PRIMARY KEY,
        hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        capture_date INTEGER,
        mtime INTEGER NOT NULL,
        device_id INTEGER NOT NULL,
        device_sequence INTEGER NOT NULL,
        sequence INTEGER NOT NULL UNIQUE
    );
    """

    /// An old-style data folder: what the server before blocks left behind.
    struct OldFolder {
        let data: String
        static let token = "vdt_" + String(repeating: "ab", count: 32)
        var blobRoot: String { data + "/blobs" }
        let db: Database

        init(_ data: String) throws {
            self.data = data
            try FileManager.default.createDirectory(atPath: data + "/blobs/staging", withIntermediateDirectories: true)
            db = try Database(path: data + "/server.db")
            try db.execute("PRAGMA journal_mode=WAL")
            try db.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)")
            try db.execute(MigrationTests.oldSchema)
            try db.run("INSERT INTO schema_migrations(name, applied_at) VALUES ('server-001-initial', 1700000000)")
            try db.run("INSERT INTO devices(name, token_hash, created_at) VALUES ('phone', ?, 1700000000)", SHA256Hasher.digest(Self.token).hex)
        }

        /// A stored blob as the old server kept it: file `<root>/ab/<sha256>`, read-only, and its row.
        func blob(_ f: TestFile) throws {
            let folder = blobRoot + "/" + f.digest.hex.prefix(2)
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            writeFile(folder + "/" + f.digest.hex, f.bytes)
            chmod(folder + "/" + f.digest.hex, 0o400)
            try db.run("INSERT INTO blobs(hash, size, created_at) VALUES (?, ?, 1700000001)", f.digest.hex, f.size)
        }

        func file(_ path: String, _ f: TestFile, sequence: Int64) throws {
            try db.run("INSERT INTO files(path, hash, size, capture_date, mtime, device_id, device_sequence, sequence) VALUES (?, ?, ?, NULL, 1700000002, 1, ?, ?)",
                       path, f.digest.hex, f.size, sequence, sequence)
        }

        /// An upload row and its staging file holding `received` bytes of `f`.
        func upload(_ id: String, _ f: TestFile, received: Int, completed: Bool = false) throws {
            try db.run("INSERT INTO uploads(id, hash, length, received, expires_at, created_at, device_id, completed_at) VALUES (?, ?, ?, ?, ?, 1700000000, 1, ?)",
                       id, f.digest.hex, f.size, Int64(received), Int64(time(nil)) + 86400, completed ? Optional(Int64(1700000003)) : nil)
            if !completed { writeFile(data + "/blobs/staging/tus-" + id, Array(f.bytes[0..<received])) }
        }

        func path(_ d: SHA256Digest) -> String { blobRoot + "/" + d.hex.prefix(2) + "/" + d.hex }
    }

    @Test func aDatabaseFromBeforeBlocksMovesForward() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let size = Blocks.size
        let small = TestFile(in: dir.path, size: (1 << 20) + 7, seed: 61)
        let bigBytes = randomBytes(size, seed: 62) + [UInt8](repeating: 0, count: size) + randomBytes(3 << 20, seed: 63)
        let big = TestFile(in: dir.path, name: "big", bytes: bigBytes)
        let empty = TestFile(in: dir.path, name: "empty", bytes: [])
        let zeros = TestFile(in: dir.path, name: "zeros", bytes: [UInt8](repeating: 0, count: 1000))
        let pendingSmall = TestFile(in: dir.path, size: 3000, seed: 64)
        let pendingBig = TestFile(in: dir.path, size: 6 << 20, seed: 65)

        let data = dir.path + "/data"
        do {
            let old = try OldFolder(data)
            for f in [small, big, empty, zeros] { try old.blob(f) }
            try old.file("Camera Roll/small.jpg", small, sequence: 1)
            try old.file("Camera Roll/big.mov", big, sequence: 2)
            try old.file("Documents/empty.txt", empty, sequence: 3)
            try old.file("zeros.bin", zeros, sequence: 4)
            try old.upload("done", small, received: Int(small.size), completed: true)
            try old.upload("pending-small", pendingSmall, received: 1000)
            try old.upload("pending-big", pendingBig, received: 2 << 20)
            try old.db.run("UPDATE devices SET watermark_sequence = 4 WHERE id = 1")
            // As if a first run of the migration was killed after adopting the big blob's
            // first block: a complete, content-addressed block file, and a stray staging file.
            let store = try BlobStore(root: old.blobRoot)
            let staging = try store.makeStagingFile()
            Array(bigBytes[0..<size]).withUnsafeBytes { try! FileIO.pwrite(staging.fd, $0, at: 0) }
            FileIO.close(staging.fd)
            try store.adopt(stagingPath: staging.path, as: big.manifest.blocks[0])
            writeFile(old.blobRoot + "/staging/0123456789abcdef", Array(bigBytes[size..<(size + 100)]))
        }
        let oldBigPath = data + "/blobs/" + big.digest.hex.prefix(2) + "/" + big.digest.hex
        let smallPath = data + "/blobs/" + small.digest.hex.prefix(2) + "/" + small.digest.hex
        let smallInode = try FileIO.status(smallPath).st_ino
        #expect(FileManager.default.fileExists(atPath: oldBigPath))

        let token = OldFolder.token
        for round in 1...2 {  // the second start finds nothing left to do
            let server = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
            defer { server.stop() }
            let client = WorkspaceClient(baseURL: server.baseURL, token: token)
            let all = [small, big, empty, zeros]
            // Every content is present: nothing already backed up is sent again.
            #expect(try client.presentContents(all.map(\.content)) == Set(all.map(\.content)), "round \(round)")
            for f in all {
                #expect(try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) == .present, "round \(round)")
                let out = open(dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
                defer { close(out) }
                #expect(try client.download(content: f.content, to: out) == f.size)  // checked against the content hash
                #expect(FileManager.default.contents(atPath: dir.path + "/out") == Data(f.bytes))
                #expect(try client.contentBlocks(f.content) == f.manifest)
            }
            // Files are listed with content hashes, in their old order, with their device.
            let files = try client.listFiles(prefix: "")
            let paths = files.map { $0.path }, hashes = files.map { $0.hash }, sequences = files.map { $0.sequence }
            #expect(paths == ["Camera Roll/big.mov", "Camera Roll/small.jpg", "Documents/empty.txt", "zeros.bin"])
            #expect(hashes == [big, small, empty, zeros].map { $0.content.hex })
            #expect(sequences == [2, 1, 3, 4])
            #expect(files.allSatisfy { $0.device == "phone" })
            #expect(try client.watermark()?.sequence == 4)
            // The small blob is its own block, in place (same file); the big one is split
            // (its zero block not stored) and its old file gone; empty and zero blobs are not blocks.
            #expect(try FileIO.status(smallPath).st_ino == smallInode)
            #expect(!FileManager.default.fileExists(atPath: oldBigPath))
            #expect(countBlockFiles(data + "/blobs") == 3)
            for d in [small.digest, big.manifest.blocks[0], big.manifest.blocks[2]] {
                #expect(try discarding { try client.downloadBlock(d, to: $0) } > 0)
            }
            // Staging: the dropped upload's file and the killed split's stray file are gone.
            let staging = try FileManager.default.contentsOfDirectory(atPath: data + "/blobs/staging")
            #expect(staging.contains("tus-pending-small"))
            #expect(!staging.contains("tus-pending-big") && !staging.contains("0123456789abcdef"))
            // The pending upload of one block goes on where it was; the longer one was dropped.
            let t = try ticket(client, pendingSmall)
            #expect(t.offset == 1000)
            #expect(t.url.contains("/v1/tus/pending-small?"))
            guard case .blocks(let fresh, _) = try client.createUpload(content: pendingBig.content, size: pendingBig.size, blocks: pendingBig.manifest.blocks) else {
                throw TestFailure("expected blocks")
            }
            #expect(fresh.map { $0.index } == [0, 1])
            #expect(!fresh.contains { $0.url.contains("pending-big") })
        }
        let db = try Database(path: data + "/server.db")
        #expect(try db.appliedMigrations() == ["server-001-initial", "server-002-blocks", "server-003-versions", "server-004-block-chunks", "server-005-deletions", "server-006-space", "server-007-tree"])
        #expect(try db.queryOne("SELECT count(*) FROM uploads WHERE id = 'pending-big'") { $0.int(0) } == 0)
        #expect(try db.queryOne("SELECT count(*) FROM obsolete_blobs") { $0.int(0) } == 0)
    }
}
