import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// End to end with the real `vdrive serve` binary.
@Suite(.tags(.endToEnd), .serialized) struct ProcessTests {
    /// Three blocks: the first sent whole, the second cut by SIGKILL after 1 MiB was
    /// recorded and more was in flight. After a restart the plan lists only the second
    /// (at exactly 1 MiB: a killed PATCH records nothing) and the third.
    @Test func sigkillMidUploadThenRestartAndResume() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("phone")
        let f = TestFile(in: dir.path, size: 3 * Blocks.size - 1000, seed: 9)
        let fd = f.open()
        defer { close(fd) }

        let first = try ServerProcess(data: data)
        defer { first.kill() }
        let client = WorkspaceClient(baseURL: first.base, token: token)
        guard case .blocks(let tickets, _) = try client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks), tickets.count == 3 else {
            throw TestFailure("expected three blocks to upload")
        }
        try client.uploadBlock(tickets[0], fd: fd)
        let one: Int64 = 1 << 20
        let second = tickets[1]
        #expect(try client.patch(url: second.url, offset: 0, fd: fd, fileOffset: second.fileOffset, length: one) == one)
        do {
            _ = try client.connection.perform(method: "PATCH", url: second.url, headers: ["Tus-Resumable: 1.0.0", "Content-Type: \(Tus.offsetContentType)", "Upload-Offset: \(one)"],
                                              body: .file(fd: fd, offset: second.fileOffset + one, length: second.length - one), progress: { n in
                if n >= 1 << 20 { first.kill(SIGKILL) }
                return true
            })
            Issue.record("the PATCH should have failed when the server was killed")
        } catch {
            #expect(error.isTransient, "\(error)")
        }
        first.kill()
        // No partial block is visible as complete.
        #expect(!FileManager.default.fileExists(atPath: BlobStore.pathFor(root: data + "/blobs", second.hash)))

        let again = try ServerProcess(data: data)
        defer { again.kill() }
        let resumed = WorkspaceClient(baseURL: again.base, token: token)
        guard case .blocks(let rest, _) = try resumed.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else { throw TestFailure("expected blocks") }
        #expect(rest.map(\.index) == [1, 2])
        #expect(rest.first?.offset == one)
        let id = { (url: String) in url.split(separator: "?").first?.split(separator: "/").last }
        #expect(rest.first.map { id($0.url) } == id(second.url))
        #expect(try resumed.uploadOffset(url: rest[0].url) == one)
        // What is left to send: the unfinished part of one block, and the block never started.
        #expect(rest.reduce(0) { $0 + $1.length - $1.offset } == f.size - Int64(Blocks.size) - one)
        for t in rest { try resumed.uploadBlock(t, fd: fd) }
        try resumed.recordFile(FileRecord(path: "Camera Roll/big.mov", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                          captureDate: nil, mtime: 1, deviceSequence: 1))
        #expect(try resumed.presentContents([f.content]) == [f.content])
        let out = open(dir.path + "/out", O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try resumed.download(content: f.content, to: out) == f.size)  // checks the content hash
        again.kill(SIGTERM)
        #expect(again.process.terminationStatus == 0)
        #expect(again.rest().contains("stopped (SIGTERM)"))
    }

    @Test func sigintStopsCleanly() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let p = try ServerProcess(data: dir.path)
        defer { p.kill() }
        p.kill(SIGINT)
        #expect(p.process.terminationStatus == 0)
    }

    @Test func portInUseDataUnwritableAndNewerDatabase() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let p = try ServerProcess(data: dir.path + "/a")
        defer { p.kill() }
        let busy = try run(vdriveBinary(), ["serve", "--data", dir.path + "/b", "--listen", "127.0.0.1:\(p.port)"])
        #expect(busy.0 == 69)
        #expect(busy.2.contains("already in use"))

        writeFile(dir.path + "/file", Array("x".utf8))
        let unwritable = try run(vdriveBinary(), ["serve", "--data", dir.path + "/file/sub", "--listen", "127.0.0.1:0"])
        #expect(unwritable.0 == 73)
        #expect(unwritable.2.contains("--data"))

        let newer = dir.path + "/newer"
        _ = try DeviceRegistry(dataDirectory: newer).add("x")
        let db = try Database(path: newer + "/server.db")
        try db.run("INSERT INTO schema_migrations(name, applied_at) VALUES ('server-999-future', 0)")
        let refused = try run(vdriveBinary(), ["serve", "--data", newer, "--listen", "127.0.0.1:0"])
        #expect(refused.0 == 78)
        #expect(refused.2.contains("newer version"))

        let usage = try run(vdriveBinary(), ["serve", "--listen", "nope"])
        #expect(usage.0 == 64)
        let help = try run(vdriveBinary(), ["serve", "--help"])
        #expect(help.0 == 0 && help.1.contains("--upload-expiry"))
    }

    @Test func deviceCommands() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let add = try run(vdriveBinary(), ["serve", "device", "add", "laptop", "--data", dir.path])
        #expect(add.0 == 0)
        #expect(add.1.hasPrefix("vdt_"))
        let dup = try run(vdriveBinary(), ["serve", "device", "add", "laptop", "--data", dir.path])
        #expect(dup.0 == 65)
        let list = try run(vdriveBinary(), ["serve", "device", "list", "--data", dir.path])
        #expect(list.1.contains("laptop\tactive"))
        let revoke = try run(vdriveBinary(), ["serve", "device", "revoke", "laptop", "--data", dir.path])
        #expect(revoke.0 == 0)
        #expect(try run(vdriveBinary(), ["serve", "device", "list", "--data", dir.path]).1.contains("laptop\trevoked"))
    }
}

extension BlobStore {
    static func pathFor(root: String, _ d: SHA256Digest) -> String { "\(root)/\(d.hex.prefix(2))/\(d.hex)" }
}

@Suite(.tags(.endToEnd)) struct ConcurrencyTests {
    @Test(arguments: Records.all) func twoClientsUploadingTheSameFileStoreEachBlockOnce(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 24 << 20, seed: 5)
        let results = Mutex<[Result<BlockManifest, ClientError>]>([])
        let threads = (0..<2).map { _ in
            Thread {
                let client = WorkspaceClient(baseURL: s.base, token: s.token)
                let fd = f.open()
                defer { close(fd) }
                let r = Result { () throws(ClientError) -> BlockManifest in try client.uploadFile(fd: fd, size: f.size, chunkSize: 1 << 20) }
                results.withLock { $0.append(r) }
            }
        }
        threads.forEach { $0.start() }
        try eventually("both uploads return", within: 120) { results.withLock { $0.count } == 2 }
        for r in results.withLock({ $0 }) {
            if case .failure(let e) = r { Issue.record("upload failed: \(e)") }
        }
        #expect(s.blockCount() == 6)
        try s.record(f, at: "f")
        #expect(try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) == .present)
        #expect(try WorkspaceClient(baseURL: s.base, token: s.token).createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) == .present)
    }

    @Test(arguments: Records.all) func manyConnectionsAtOnce(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let done = Mutex(0)
        let failures = Mutex(0)
        for _ in 0..<16 {
            Thread {
                let c = WorkspaceClient(baseURL: s.base, token: s.token)
                for _ in 0..<20 { if (try? c.health()) == nil { failures.withLock { $0 += 1 } } }
                done.withLock { $0 += 1 }
            }.start()
        }
        try eventually("all 16 clients finish", within: 60) { done.withLock { $0 } == 16 }
        #expect(failures.withLock { $0 } == 0)
    }
}

import Synchronization
