import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Synchronization
import Testing

/// `vdrive serve snapshot`: a copy taken while a device keeps uploading, from which a new
/// server starts; the device carries on there with its token, every file recorded before
/// the snapshot reads back whole, and nothing it sent is asked for again.
@Suite(.tags(.endToEnd), .serialized) struct SnapshotTests {
    @Test func aSnapshotOfARunningServerStartsAServerDevicesCarryOnWith() throws {
        let server = try TestServer()
        defer { server.stop() }
        let data = server.server.configuration.dataDirectory
        var before: [(TestFile, String)] = []
        for (i, size) in [1, 70_000, 300_000, Blocks.size, 2 * Blocks.size + 5].enumerated() {
            let f = TestFile(in: server.dir.path, size: size, seed: UInt64(i + 1))
            try server.store(f, at: "Camera Roll/before-\(i).jpg")
            before.append((f, "Camera Roll/before-\(i).jpg"))
        }
        // The same bytes under a second name: one block, named twice.
        try server.record(before[2].0, at: "Camera Roll/copy.jpg", sequence: 2)
        // Sent in a block pack: in the server's pack file, copied out of it into the snapshot.
        let packed = TestFile(in: server.dir.path, size: 50_000, seed: 77)
        _ = try server.client.sendBlockPack([(digest: packed.manifest.blocks[0], bytes: OutgoingBlockBytes.memory(packed.bytes), length: Int(packed.size))])
        try server.record(packed, at: "Camera Roll/packed.jpg", sequence: 3)
        before.append((packed, "Camera Roll/packed.jpg"))

        // A device keeps uploading while the snapshot is taken.
        let stop = Atomic<Bool>(false)
        let during = Mutex<[(TestFile, String)]>([])
        let writer = Thread {
            var i = 0
            while !stop.load(ordering: .relaxed) {
                let f = TestFile(in: server.dir.path, size: 200_000 + i, seed: UInt64(100 + i))
                let path = "Camera Roll/during-\(i).jpg"
                if (try? server.store(f, at: path)) != nil { during.withLock { $0.append((f, path)) } }
                i += 1
            }
        }
        writer.start()
        // On every path: the writer stops within one upload, or the test fails (no hang).
        defer { stop.store(true, ordering: .relaxed); try? eventually("the writer stops") { writer.isFinished } }
        try eventually("uploads under way") { during.withLock { $0.count } >= 2 }

        let snapshot = server.dir.path + "/snapshot"
        let (status, out, err) = try run(vdriveBinary(), ["serve", "snapshot", snapshot, "--data", data])
        #expect(status == 0, "\(err)")
        #expect(out.contains("Snapshot of \(data) in \(snapshot)"), "\(out)")
        stop.store(true, ordering: .relaxed)
        try eventually("the writer stops") { writer.isFinished }
        #expect((try? FileIO.status(snapshot).st_mode).map { $0 & 0o777 } == 0o700)
        #expect((try? FileIO.status(snapshot + "/server.db").st_mode).map { $0 & 0o777 } == 0o600)
        server.server.stop()

        let restored = try WorkspaceServer(ServerConfiguration(dataDirectory: snapshot, host: "127.0.0.1", port: 0))
        defer { restored.stop() }
        let client = WorkspaceClient(baseURL: restored.baseURL, token: server.token)
        let listed = Dictionary(try client.listFiles(prefix: "").map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        for (f, path) in before {
            #expect(listed[path]?.hash == f.content.hex, "\(path) is in the snapshot")
            #expect(try Self.download(client, f, in: server.dir.path) == f.bytes, "\(path) reads back whole")
        }
        #expect(listed["Camera Roll/copy.jpg"]?.hash == before[2].0.content.hex)
        // Recorded while the snapshot ran: in it whole, or not in it at all.
        for (f, path) in during.withLock({ $0 }) where listed[path] != nil {
            #expect(try Self.download(client, f, in: server.dir.path) == f.bytes, "\(path), recorded during the snapshot")
        }
        // Nothing sent before is asked for again; a new file goes up and comes back.
        let contents = before.map(\.0.content)
        #expect(try client.presentContents(contents) == Set(contents))
        let next = TestFile(in: server.dir.path, size: 123_456, seed: 999)
        let fd = next.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: next.size)
        _ = try client.recordFile(FileRecord(path: "Camera Roll/after.jpg", hash: next.content.hex, size: next.size,
                                             blocks: next.manifest.blocks.map(\.hex), captureDate: nil, mtime: 1, deviceSequence: 99))
        #expect(try Self.download(client, next, in: server.dir.path) == next.bytes)
    }

    @Test func aSnapshotRefusesAFolderInUseAndNamesWhatIsMissing() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        var r = try run(vdriveBinary(), ["serve", "snapshot", dir.path + "/out", "--data", dir.path + "/nothing"])
        #expect(r.0 == 66, "\(r.2)")
        try FileManager.default.createDirectory(atPath: dir.path + "/busy", withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: dir.path + "/busy/x", contents: Data()))
        let server = try TestServer()
        defer { server.stop() }
        r = try run(vdriveBinary(), ["serve", "snapshot", dir.path + "/busy", "--data", server.server.configuration.dataDirectory])
        #expect(r.0 == 73, "\(r.2)")
        r = try run(vdriveBinary(), ["serve", "snapshot", dir.path + "/pg", "--database", "postgresql://nobody@/none"])
        #expect(r.0 == 64, "\(r.2)")
    }

    static func download(_ client: WorkspaceClient, _ f: TestFile, in dir: String) throws -> [UInt8] {
        let path = dir + "/download-" + f.content.hex.prefix(12)
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        _ = try client.download(content: f.content, to: fd)
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }
}
