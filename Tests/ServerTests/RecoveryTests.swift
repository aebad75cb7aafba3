import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import TestSupport
import Testing

/// The first block upload of `f`'s plan.
func ticket(_ client: WorkspaceClient, _ f: TestFile) throws -> BlockTicket {
    guard case .blocks(let tickets, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks), let first = tickets.first else {
        throw TestFailure("expected a block to upload")
    }
    return first
}

/// What the server repairs when it starts on a data folder left by an unclean stop.
@Suite(.tags(.endToEnd)) struct RecoveryTests {
    func start(_ data: String, _ database: DatabaseLocation?, expiry: Int64 = 7 * 86400) throws -> WorkspaceServer {
        try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0, uploadExpiry: expiry, database: database))
    }

    /// What each case starts from: fresh records, a data folder, one device's token.
    func fresh(_ records: Records) throws -> (DatabaseLocation?, TemporaryDirectory, String, String) {
        let database = try records.freshLocation()
        let dir = TemporaryDirectory()
        let data = dir.path + "/data"
        do {
            return (database, dir, data, try DeviceRegistry(dataDirectory: data, database: database).add("d"))
        } catch {
            dir.remove()
            throw error
        }
    }

    @Test(arguments: Records.all) func offsetIsClampedToTheStagingFile(_ records: Records) throws {
        let (database, dir, data, token) = try fresh(records)
        defer { dir.remove() }
        let f = TestFile(in: dir.path, size: 3000)
        let fd = f.open()
        defer { close(fd) }
        var id = ""
        do {
            let server = try start(data, database)
            defer { server.stop() }
            let client = WorkspaceClient(baseURL: server.baseURL, token: token)
            let url = try ticket(client, f).url
            #expect(try client.patch(url: url, offset: 0, fd: fd, fileOffset: 0, length: 1000) == 1000)
            id = String(url.split(separator: "/").last!.prefix { $0 != "?" })
        }
        // As after a power loss that kept the row but lost the file's tail.
        #expect(truncate(data + "/blobs/staging/tus-" + id, 400) == 0)
        let server = try start(data, database)
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        let t = try ticket(client, f)
        #expect(t.offset == 400)
        #expect(try client.uploadOffset(url: t.url) == 400)
        try client.uploadFile(fd: fd, size: f.size)
        #expect(try discarding { try client.downloadBlock(f.digest, to: $0) } == f.size)
    }

    /// Killed after the last PATCH's bytes were on file and its offset recorded, but
    /// before the block was committed: the next plan finishes the block (it is then
    /// present, read back whole) instead of a ticket that says nothing is left to send,
    /// which left the content missing forever. Damaged staged bytes start the upload over.
    @Test(arguments: Records.all) func bytesAllReceivedButNeverCommittedAreCommittedAtTheNextPlan(_ records: Records) throws {
        let (database, dir, data, token) = try fresh(records)
        defer { dir.remove() }
        let f = TestFile(in: dir.path, size: 3000, seed: 31)
        let damaged = TestFile(in: dir.path, size: 3000, seed: 32)
        var ids: [String] = []
        do {
            let server = try start(data, database)
            defer { server.stop() }
            let client = WorkspaceClient(baseURL: server.baseURL, token: token)
            for file in [f, damaged] {
                let fd = file.open()
                defer { close(fd) }
                let url = try ticket(client, file).url
                #expect(try client.patch(url: url, offset: 0, fd: fd, fileOffset: 0, length: 1000) == 1000)
                ids.append(String(url.split(separator: "/").last!.prefix { $0 != "?" }))
            }
        }
        // The state a kill leaves between the offset's update and the commit: every byte
        // staged, the offset at the end, no block (the second one's bytes damaged).
        for (id, file) in zip(ids, [f, damaged]) {
            var bytes = try #require(FileManager.default.contents(atPath: file.path)).map { $0 }
            if file.digest == damaged.digest { bytes[2999] ^= 0xff }
            writeFile(data + "/blobs/staging/tus-" + id, bytes)
            let sql = "UPDATE uploads SET received = length WHERE id = '\(id)'"
            switch database {
            case .postgres(let url)?:
                _ = try #require(PostgresCluster.shared).psql(PostgresCluster.databaseName(of: url), sql)
            default:
                try Database(path: data + "/server.db").execute(sql)
            }
        }
        let server = try start(data, database)
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        guard case .blocks(let none, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("expected a plan") }
        #expect(none.isEmpty, "the staged block is committed, nothing is left to send")
        #expect(try discarding { try client.downloadBlock(f.digest, to: $0) } == f.size)
        // Damaged: sent again from 0, then stored and read back.
        let again = try ticket(client, damaged)
        #expect(again.offset == 0)
        let fd = damaged.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: damaged.size)
        #expect(try discarding { try client.downloadBlock(damaged.digest, to: $0) } == damaged.size)
    }

    @Test(arguments: Records.all) func expiredUploadsAreSweptAndStrayStagingFilesRemoved(_ records: Records) throws {
        let (database, dir, data, token) = try fresh(records)
        defer { dir.remove() }
        let f = TestFile(in: dir.path, size: 100)
        var oldURL = ""
        do {
            let server = try start(data, database, expiry: -10)
            defer { server.stop() }
            oldURL = try ticket(WorkspaceClient(baseURL: server.baseURL, token: token), f).url
        }
        writeFile(data + "/blobs/staging/leftover", [1, 2, 3])
        let server = try start(data, database)
        defer { server.stop() }
        let staging = try FileManager.default.contentsOfDirectory(atPath: data + "/blobs/staging")
        #expect(staging.isEmpty)
        let t = try ticket(WorkspaceClient(baseURL: server.baseURL, token: token), f)
        let url = t.url
        #expect(t.offset == 0)
        #expect(url.split(separator: "?")[0].split(separator: "/").last != oldURL.split(separator: "?")[0].split(separator: "/").last)
    }

    @Test(arguments: Records.all) func blockRenamedButNotRecordedIsRecordedAfterCheck(_ records: Records) throws {
        let (database, dir, data, token) = try fresh(records)
        defer { dir.remove() }
        let f = TestFile(in: dir.path, size: 5000)
        let bad = TestFile(in: dir.path, size: 5000, seed: 2)
        // As if killed between the rename into the store and the row: one right, one damaged.
        for (name, source) in [(f.digest, f), (bad.digest, f)] {
            let folder = data + "/blobs/" + name.hex.prefix(2)
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: source.path, toPath: folder + "/" + name.hex)
        }
        let server = try start(data, database)
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        guard case .blocks(let none, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("expected a plan") }
        #expect(none.isEmpty)
        #expect(try ticket(client, bad).hash == bad.digest, "a block file with the wrong content must not count as present")
        #expect(!FileManager.default.fileExists(atPath: data + "/blobs/" + bad.digest.hex.prefix(2) + "/" + bad.digest.hex))
    }

    @Test(arguments: Records.all) func packedBlockIndexedButNotRecordedIsRecordedAfterCheck(_ records: Records) throws {
        let (database, dir, data, token) = try fresh(records)
        defer { dir.remove() }
        let f = TestFile(in: dir.path, size: 5000)
        let bad = TestFile(in: dir.path, size: 5000, seed: 2)
        let end: Int64
        do {
            // As if killed between the pack's index and the records: one block right, one
            // damaged; then bytes of a pack killed before its index, at the end.
            try FileManager.default.createDirectory(atPath: data + "/blobs/packs", withIntermediateDirectories: true)
            let pack = try PackFile(path: data + "/blobs/packs/1.pack", writable: true)
            let index = try Database(path: data + "/blobs/packs/index.db")
            try index.execute("CREATE TABLE packed(hash BLOB PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID")
            for (name, source) in [(f.digest, f), (bad.digest, TestFile(in: dir.path, size: 5000, seed: 3))] {
                let bytes = try [UInt8](#require(FileManager.default.contents(atPath: source.path)))
                let offset = try bytes.withUnsafeBytes { try pack.append($0) }
                _ = try index.run("INSERT INTO packed VALUES (?, 1, ?, ?)", name.bytes, offset, bytes.count)
            }
            end = pack.end
            _ = try randomBytes(3000, seed: 4).withUnsafeBytes { try pack.append($0) }
        }
        let server = try start(data, database)
        defer { server.stop() }
        let pack = try FileManager.default.attributesOfItem(atPath: data + "/blobs/packs/1.pack")
        #expect((pack[.size] as? NSNumber)?.int64Value == end, "the bytes after the last indexed block are cut")
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        guard case .blocks(let none, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("expected a plan") }
        #expect(none.isEmpty)
        #expect(try discarding { try client.downloadBlock(f.digest, to: $0) } == f.size)
        #expect(try ticket(client, bad).hash == bad.digest, "a packed block with the wrong content must not count as present")
        let rows = try Database(path: data + "/blobs/packs/index.db").query("SELECT hash FROM packed") { $0.bytes(0) ?? [] }
        #expect(rows == [f.digest.bytes], "the damaged block's row is gone")
    }
}

/// Stopping the server (SIGTERM path) while a PATCH is in flight.
@Suite(.tags(.logic)) struct StopTests {
    @Test func stopDuringAPatchKeepsTheBytesReceived() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("d")
        let f = TestFile(in: dir.path, size: Blocks.size, seed: 21)
        let fd = f.open()
        defer { close(fd) }
        let server = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
        var stopped = false
        defer { if !stopped { server.stop() } }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        let url = try ticket(client, f).url
        let sent = Mutex<Int64>(0)
        let started = Mutex(false)
        let done = Mutex(false)
        Thread {
            _ = try? client.connection.perform(method: "PATCH", url: url, headers: ["Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 0"],
                                               body: .file(fd: fd, offset: 0, length: f.size), progress: { n in
                sent.withLock { $0 = n }
                // Slow down once 1 MiB is out, so that the stop lands mid-block.
                if n >= 1 << 20 { started.withLock { $0 = true }; usleep(20_000) }
                return true
            })
            done.withLock { $0 = true }
        }.start()
        try eventually("1 MiB of the PATCH is out") { started.withLock { $0 } }
        server.stop()
        stopped = true
        try eventually("the PATCH returns after the stop") { done.withLock { $0 } }

        let again = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
        defer { again.stop() }
        let second = WorkspaceClient(baseURL: again.baseURL, token: token)
        let offset = try ticket(second, f).offset
        #expect(offset > 0)
        #expect(offset <= sent.withLock { $0 })
        try second.uploadFile(fd: fd, size: f.size)
        #expect(try discarding { try second.downloadBlock(f.digest, to: $0) } == f.size)
    }
}

import Synchronization
