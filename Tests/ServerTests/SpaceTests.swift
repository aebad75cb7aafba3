import Client
import Crypto
import Foundation
import ObjectStore
import Protocol
@testable import Server
import Storage
import Synchronization
import Testing

/// Space on the server: the garbage collection (`vdrive serve gc`), usage and the quota,
/// on the embedded back end (SQLite, blocks in the data folder) and the scaled one
/// (PostgreSQL, blocks in SeaweedFS).
@Suite(.tags(.endToEnd), .serialized) struct SpaceTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible {
        case embedded
        case scaled
        var testDescription: String { rawValue }
    }

    /// A server on `backend`, a collector on the same records and blocks, and an admin.
    final class Space: @unchecked Sendable { // set up once, then only read
        let store: ScaledStoreTests.Store?
        let server: TestServer
        let collector: SpaceCollector
        let admin: BackupAdmin

        init(_ backend: Backend, configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
            store = backend == .scaled ? try ScaledStoreTests.Store() : nil
            do {
                server = try TestServer(store: store?.choice ?? .folder, records: backend == .scaled ? .postgres : .sqlite) { c in
                    c.gcInterval = 0
                    configure(&c)
                }
            } catch { store?.stop(); throw error }
            let configuration = server.server.configuration
            collector = try SpaceCollector(configuration)
            admin = try BackupAdmin(dataDirectory: configuration.dataDirectory, database: configuration.database)
        }

        func stop() { server.stop(); store?.stop() }

        /// One collection; when the lock is taken (the server's start finishes a killed
        /// run's removals under it), again once it is free.
        func collect(grace: Int64, dryRun: Bool = false) throws -> SpaceCollector.Report {
            var report: SpaceCollector.Report?
            try eventually("the collection lock is free") {
                do { report = try collector.collect(grace: grace, dryRun: dryRun) } catch is SpaceCollector.Busy { return false }
                return true
            }
            return report!
        }

        var client: WorkspaceClient { server.client }

        /// Whether the block's bytes are in the store (a file, or an object).
        func holdsBytes(_ d: SHA256Digest) throws -> Bool {
            if let store { return try store.object(d) != nil }
            return FileManager.default.fileExists(atPath: server.blobRoot + "/" + d.hex.prefix(2) + "/" + d.hex)
        }

        /// Downloads `f`'s content and compares it with its bytes.
        func readsBack(_ f: TestFile) throws -> Bool {
            let out = server.dir.path + "/read-\(f.content.hex.prefix(12))"
            let fd = Glibc.open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600)
            defer { close(fd); unlink(out) }
            try client.download(content: f.content, to: fd)
            return FileManager.default.contents(atPath: out).map { Array($0) } == f.bytes
        }
    }

    /// Three files: `a` and `b` share their first (whole) block, `c` has its own.
    static func files(in dir: String) -> (TestFile, TestFile, TestFile) {
        let shared = randomBytes(Blocks.size, seed: 70)
        return (TestFile(in: dir, name: "a", bytes: shared + randomBytes(90_000, seed: 71)),
                TestFile(in: dir, name: "b", bytes: shared + randomBytes(80_000, seed: 72)),
                TestFile(in: dir, name: "c", bytes: randomBytes(120_000, seed: 73)))
    }

    @Test(arguments: Backend.allCases) func deletedBackupsBlocksGoAfterTheGraceNamedOnesStay(_ backend: Backend) throws {
        let space = try Space(backend); defer { space.stop() }
        let (a, b, c) = Self.files(in: space.server.dir.path)
        try space.server.store(a, at: "a.bin")
        try space.server.store(b, at: "b.bin")
        try space.server.store(c, at: "c.bin")
        let aOwn = a.manifest.blocks[1], shared = a.manifest.blocks[0]

        // Nothing unnamed yet: nothing goes, even with no grace.
        #expect(try space.collect(grace: 0) == SpaceCollector.Report())
        try space.admin.delete(device: "test-device", path: "a.bin")
        // Within the grace: kept, and the dry run says what would go without removing it.
        #expect(try space.collect(grace: 3600).blocks == 0)
        let dry = try space.collect(grace: 0, dryRun: true)
        #expect(dry.contents == 1 && dry.blocks == 1 && dry.bytes == 90_000)
        #expect(try space.holdsBytes(aOwn))

        let report = try space.collect(grace: 0)
        #expect(report.contents == 1 && report.blocks == 1 && report.bytes == 90_000, "\(report)")
        #expect(try !space.holdsBytes(aOwn))
        #expect(try !space.server.hasBlock(aOwn))
        #expect(try space.holdsBytes(shared), "the block b still uses stays")
        #expect(try space.readsBack(b))
        #expect(try space.readsBack(c))
        #expect(try space.client.presentContents([a.content]).isEmpty, "a's content is gone: dedup no longer offers it")

        // What went comes back: a uploaded and recorded again reads back whole.
        try space.server.store(a, at: "a.bin")
        #expect(try space.readsBack(a))
        #expect(try space.collect(grace: 0).blocks == 0)
    }

    @Test(arguments: Backend.allCases) func usageCountsEachDeviceAndWhatGCWouldFree(_ backend: Backend) throws {
        let space = try Space(backend); defer { space.stop() }
        let configuration = space.server.server.configuration
        let phoneToken = try DeviceRegistry(dataDirectory: configuration.dataDirectory, database: configuration.database).add("phone")
        let phone = WorkspaceClient(baseURL: space.server.base, token: phoneToken)
        let (a, b, c) = Self.files(in: space.server.dir.path)
        try space.server.store(a, at: "a.bin")
        try space.server.record(a, at: "a.bin", sequence: 2, mtime: 2)  // same content again: one version
        try space.server.store(c, at: "c.bin")
        try space.server.store(b, at: "c.bin")  // a second version of c.bin
        let fd = b.open(); defer { close(fd) }
        try phone.uploadFile(fd: fd, size: b.size)
        _ = try phone.recordFile(FileRecord(path: "b.bin", hash: b.content.hex, size: b.size, blocks: b.manifest.blocks.map(\.hex),
                                            captureDate: nil, mtime: 1, deviceSequence: 1))
        let block = Int64(Blocks.size)
        var usage = try SpaceUsage.measure(space.collector, grace: 0, quota: nil)
        let test = try #require(usage.devices.first { $0.name == "test-device" })
        let phoneUsage = try #require(usage.devices.first { $0.name == "phone" })
        #expect(test.files == 2 && test.versions == 3)
        #expect(test.referencedBytes == block + 90_000 + 80_000 + 120_000)
        #expect(test.uniqueBytes == 90_000 + 120_000, "the shared block and b's own are the phone's too")
        #expect(phoneUsage.files == 1 && phoneUsage.versions == 1)
        #expect(phoneUsage.referencedBytes == block + 80_000 && phoneUsage.uniqueBytes == 0)
        #expect(usage.blocks == 4 && usage.storedBytes == block + 90_000 + 80_000 + 120_000)
        #expect(usage.collectableBlocks == 0 && usage.collectableBytes == 0)

        try space.admin.delete(device: "test-device", path: "c.bin")
        usage = try SpaceUsage.measure(space.collector, grace: 0, quota: nil)
        #expect(usage.collectableBlocks == 1 && usage.collectableBytes == 120_000, "b's block is the phone's still")
        #expect(try SpaceUsage.measure(space.collector, grace: 3600, quota: nil).collectableBytes == 0, "within the grace nothing would go")
        #expect(try space.collect(grace: 0).bytes == 120_000)
        usage = try SpaceUsage.measure(space.collector, grace: 0, quota: nil)
        #expect(usage.storedBytes == block + 90_000 + 80_000)
    }

    /// Devices upload, record and have versions deleted while the collection loops with no
    /// grace; afterwards every recorded file downloads whole. A collection that removed a
    /// block without deciding again at the moment of removal loses files here.
    @Test(arguments: Backend.allCases) func collectionRunningWithUploadsAndRecordsLosesNothing(_ backend: Backend) throws {
        let seed = testSeed()
        print("SpaceTests.collectionRunningWithUploadsAndRecordsLosesNothing(\(backend)) seed \(seed)")
        let space = try Space(backend); defer { space.stop() }
        let pool = (0..<10).map { TestFile(in: space.server.dir.path, size: 20_000 + $0 * 7_000, seed: seed &+ UInt64($0)) }
        let byContent = Dictionary(uniqueKeysWithValues: pool.map { ($0.content, $0) })
        let stop = Atomic<Bool>(false)
        let failures = Mutex<[String]>([])
        let collections = Atomic<Int>(0)
        let gc = Thread {
            while !stop.load(ordering: .relaxed) {
                do { _ = try space.collector.collect(grace: 0); collections.add(1, ordering: .relaxed) } catch is SpaceCollector.Busy {
                    // The server's start finishes a killed run's removals under the same lock: next turn.
                } catch {
                    failures.withLock { $0.append("gc: \(error)") }
                }
                // A breath between passes: with no grace at all, a collection looping
                // back to back can take a device's fresh blocks before every one of its
                // attempts records them (a live lock the grace prevents in use), which
                // says nothing about what this test checks: that nothing recorded is lost.
                usleep(5_000)
            }
        }
        gc.start()
        let group = DispatchGroup()
        for worker in 0..<3 {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                var random = SeededGenerator(seed: seed &+ UInt64(100 + worker))
                for step in 0..<25 {
                    let f = pool[Int.random(in: 0..<pool.count, using: &random)]
                    let path = "w\(worker)/\(Int.random(in: 0..<4, using: &random)).bin"
                    do {
                        try Self.storeUntilRecorded(f, at: path, sequence: Int64(step + 1), client: space.client)
                        if Bool.random(using: &random) { try space.admin.delete(device: "test-device", path: path) }
                    } catch {
                        failures.withLock { $0.append("worker \(worker) step \(step): \(error)") }
                    }
                }
            }
            thread.start()
        }
        group.wait()
        // At least a few collections after the last record.
        // (Else "nothing recorded is lost" would hold of a collector that never ran.)
        let after = collections.load(ordering: .relaxed)
        let collected = Result { try eventually("two collections after the last record") { collections.load(ordering: .relaxed) >= after + 2 } }
        stop.store(true, ordering: .relaxed)
        try eventually("the collector thread stops", within: 60) { gc.isFinished }
        try collected.get()
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        let recorded = try space.client.listFiles(prefix: "")
        #expect(!recorded.isEmpty)
        for record in recorded {
            let digest = try #require(SHA256Digest(hex: record.hash))
            let f = try #require(byContent[digest])
            #expect(try space.readsBack(f), "\(record.path) (\(record.hash)) does not read back; seed \(seed)")
        }
        #expect(collections.load(ordering: .relaxed) > 2)
    }

    /// Uploads and records `f` as a device does: a record refused because a block or the
    /// content went meanwhile is answered by uploading again.
    static func storeUntilRecorded(_ f: TestFile, at path: String, sequence: Int64, client: WorkspaceClient) throws {
        let fd = f.open(); defer { close(fd) }
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            do {
                try client.uploadFile(fd: fd, size: f.size)
                _ = try client.recordFile(FileRecord(path: path, hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                                     captureDate: nil, mtime: sequence, deviceSequence: sequence))
                return
            } catch {
                // Blocks or the content went meanwhile (409, 404), or a block was being removed (503): again.
                guard Self.isRetried(error) else { throw error }
            }
        }
        throw TestFailure("\(path) was not recorded within 60 s of attempts")
    }

    static func isRetried(_ error: ClientError) -> Bool {
        switch error {
        // notFound: an object PUT to the store went with the block before it was verified.
        case .missingBlocks, .notFound: return true
        case .http(let status, _): return status == 503 || status == 409
        default: return false
        }
    }

    /// `vdrive serve gc` killed with SIGKILL mid-sweep: every kept file still reads back,
    /// no row is left without its bytes, and the next run finishes the removals.
    @Test(arguments: Backend.allCases) func gcKilledMidSweepLosesNothing(_ backend: Backend) throws {
        let space = try Space(backend); defer { space.stop() }
        let dir = space.server.dir.path
        let files = (0..<8).map { TestFile(in: dir, size: 30_000 + $0 * 1000, seed: 300 + UInt64($0)) }
        for (i, f) in files.enumerated() { try space.server.store(f, at: "f\(i).bin") }
        for i in 0..<5 { try space.admin.delete(device: "test-device", path: "f\(i).bin") }

        let configuration = space.server.server.configuration
        var arguments = ["serve", "gc", "--grace", "0", "--data", configuration.dataDirectory] + Records.arguments(configuration.database)
        if let store = space.store {
            try "aws_access_key_id = \(store.weed.accessKey)\naws_secret_access_key = \(store.weed.secretKey)\n".write(toFile: dir + "/credentials", atomically: true, encoding: .utf8)
            arguments += ["--store", store.weed.storeURL + "&credentials=" + dir + "/credentials"]
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: vdriveBinary())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["VDRIVE_GC_PAUSE_MS": "400"]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Killed once the first block is gone from the records (its marker stands, its bytes wait).
        let deadline = Date().addingTimeInterval(60)
        while try SpaceUsage.measure(space.collector, grace: 0, quota: nil).blocks == 8, Date() < deadline { usleep(20_000) }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)

        for i in 5..<8 { #expect(try space.readsBack(files[i])) }
        // Every block with a row has its bytes.
        for f in files where try space.server.hasBlock(f.digest) { #expect(try space.holdsBytes(f.digest)) }
        let report = try space.collect(grace: 0)
        #expect(report.finished >= 1, "\(report)")
        for i in 0..<5 { #expect(try !space.holdsBytes(files[i].digest)) }
        #expect(try SpaceUsage.measure(space.collector, grace: 0, quota: nil).blocks == 3)
        // A removed file uploaded again (its block had a marker) comes back whole.
        try space.server.store(files[0], at: "f0.bin")
        #expect(try space.readsBack(files[0]))
    }

    /// One-block files whose objects a device PUT with the plan's presigned URLs and never
    /// verified: no block row names them.
    static func orphans(_ space: Space, count: Int, seed: UInt64) throws -> [TestFile] {
        let files = (0..<count).map { TestFile(in: space.server.dir.path, size: 40_000 + $0 * 1000, seed: seed + UInt64($0)) }
        for f in files {
            let ticket = try #require(try ScaledStoreTests.plan(space.client, f).first)
            let fd = f.open(); defer { close(fd) }
            let put = try space.server.raw.perform(method: "PUT", url: ticket.url, headers: ScaledStoreTests.headers(ticket),
                                                   body: .file(fd: fd, offset: 0, length: ticket.length))
            #expect(put.status == 200)
            #expect(try space.holdsBytes(f.digest))
        }
        return files
    }

    /// Removal markers standing now.
    static func markers(_ space: Space) throws -> Int {
        try space.collector.metadata.withSession { db in try db.queryOne("SELECT COUNT(*) FROM block_removals") { $0.int(0) } ?? 0 }
    }

    @Test func orphanObjectsGoAfterTheGraceNamedOnesStay() throws {
        let space = try Space(.scaled); defer { space.stop() }
        let kept = TestFile(in: space.server.dir.path, size: Blocks.size + 5000, seed: 90)
        try space.server.store(kept, at: "kept.bin")
        let orphans = try Self.orphans(space, count: 2, seed: 91)

        #expect(try space.collect(grace: 3600) == SpaceCollector.Report(), "within the grace an object stays")
        let dry = try space.collect(grace: 0, dryRun: true)
        #expect(dry.objects == 2 && dry.objectBytes == orphans[0].size + orphans[1].size && dry.blocks == 0, "\(dry)")
        for f in orphans { #expect(try space.holdsBytes(f.digest)) }

        let report = try space.collect(grace: 0)
        #expect(report.objects == 2 && report.objectBytes == orphans[0].size + orphans[1].size && report.blocks == 0, "\(report)")
        for f in orphans { #expect(try !space.holdsBytes(f.digest)) }
        for block in kept.manifest.blocks { #expect(try space.holdsBytes(block)) }
        #expect(try space.readsBack(kept))
        #expect(try Self.markers(space) == 0)
        // Its verify now finds nothing; the device sends it again and it reads back.
        #expect(throws: ClientError.notFound) { try space.client.verifyBlock(orphans[0].digest) }
        try space.server.store(orphans[0], at: "again.bin")
        #expect(try space.readsBack(orphans[0]))
        #expect(try space.collect(grace: 0) == SpaceCollector.Report())
    }

    /// `vdrive serve gc` killed with SIGKILL between an orphan's marker and the removal of
    /// its object: a verify of it is refused while the marker stands (the object is still
    /// there, and would otherwise be recorded and then lost), named blocks are untouched,
    /// and the next run finishes the removal.
    @Test func gcKilledMidOrphanSweepLosesNothingAndVerifyWaits() throws {
        let space = try Space(.scaled); defer { space.stop() }
        let dir = space.server.dir.path
        let kept = (0..<3).map { TestFile(in: dir, size: 30_000 + $0, seed: 95 + UInt64($0)) }
        for (i, f) in kept.enumerated() { try space.server.store(f, at: "k\(i).bin") }
        let orphans = try Self.orphans(space, count: 4, seed: 100)

        let configuration = space.server.server.configuration
        let store = try #require(space.store)
        let arguments = ["serve", "gc", "--grace", "0", "--data", configuration.dataDirectory] + Records.arguments(configuration.database)
            + ["--store", try store.weed.storeURL(credentialsIn: dir + "/credentials")]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: vdriveBinary())
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["VDRIVE_GC_PAUSE_MS": "3000"]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        while try Self.markers(space) == 0, process.isRunning, Date() < deadline { usleep(20_000) }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
        let marked = try space.collector.metadata.withSession { db in try db.query("SELECT hash FROM block_removals") { $0.string(0) ?? "" } }
        #expect(marked.count == 1, "\(marked)")
        let victim = try #require(orphans.first { marked.contains($0.digest.hex) })

        // Its object may still be there; a verify must not record it while the marker stands.
        let verify = try space.server.send("POST", "/v1/blocks/\(victim.digest.hex)/verify", headers: ["Expect:"], body: .bytes([]))
        #expect(verify.status == 503, "\(verify.status) \(verify.text)")
        #expect(try !space.server.hasBlock(victim.digest))
        for f in kept { #expect(try space.readsBack(f)) }

        let report = try space.collect(grace: 0)
        #expect(report.finished == 1 && report.objects == 3, "\(report)")
        for f in orphans { #expect(try !space.holdsBytes(f.digest)) }
        for f in kept { #expect(try space.readsBack(f)) }
        #expect(try Self.markers(space) == 0)
        #expect(throws: ClientError.notFound) { try space.client.verifyBlock(victim.digest) }
        try space.server.store(victim, at: "victim.bin")
        #expect(try space.readsBack(victim))
    }

    /// The workspace tree names contents too: a file only in the tree and one only in its
    /// trash keep their blocks through a collection with no grace; once the trash is
    /// purged, the collection takes what only the purged node named.
    @Test(arguments: Backend.allCases) func treeAndTrashContentsStayPurgedOnesGo(_ backend: Backend) throws {
        let space = try Space(backend); defer { space.stop() }
        let (live, trashed, purged) = (TestFile(in: space.server.dir.path, size: 50_000, seed: 81),
                                       TestFile(in: space.server.dir.path, size: 60_000, seed: 82),
                                       TestFile(in: space.server.dir.path, size: 70_000, seed: 83))
        var versions: [Int64] = [], ids: [String] = []
        for f in [live, trashed, purged] {
            let fd = f.open(); defer { close(fd) }
            try space.client.uploadFile(fd: fd, size: f.size)
            let id = TreeTests.newID()
            let result = try TreeTests.one(space.client, TreeTests.file(id, "\(f.size).bin", content: f))
            versions.append(try #require(result.node?.version, "\(result)"))
            ids.append(id)
        }
        let now = Int64(time(nil))
        #expect(try TreeTests.one(space.client, .delete(id: ids[2], base: versions[2])).status == 200)
        #expect(try space.collector.purgeTrash(days: 30, now: now + 29 * 86_400) == 0, "not old enough")
        #expect(try space.collector.purgeTrash(days: 0, now: now + 365 * 86_400) == 0, "0 keeps the trash forever")
        #expect(try space.collector.purgeTrash(days: 30, now: now + 31 * 86_400) == 1)
        #expect(try TreeTests.one(space.client, .delete(id: ids[1], base: versions[1])).status == 200)

        let report = try space.collect(grace: 0)
        #expect(report.contents == 1 && report.blocks == 1 && report.bytes == purged.size, "\(report)")
        #expect(try space.readsBack(live))
        #expect(try space.readsBack(trashed))
        #expect(try !space.holdsBytes(purged.digest))
        // The purged node stays as a tombstone in the feed; the trashed one comes back whole.
        let tombstone = try #require(try space.client.treePage(since: 0).nodes.first { $0.id == ids[2] })
        #expect(tombstone.deleted && tombstone.hash == nil && tombstone.version > versions[2])
        #expect(try space.client.nodeVersions(id: ids[2]).isEmpty)
        #expect(try space.client.restore(ids: [ids[1], ids[2]]).skipped.map(\.error) == ["purged"])
        #expect(try space.readsBack(trashed))
    }

    @Test(arguments: Backend.allCases) func quotaRefusesNewBytesButNotLinksAndFreeingLiftsIt(_ backend: Backend) throws {
        let space = try Space(backend) { $0.quota = 200_000 }; defer { space.stop() }
        let dir = space.server.dir.path
        let first = TestFile(in: dir, size: 150_000, seed: 80), second = TestFile(in: dir, size: 100_000, seed: 81)
        try space.server.store(first, at: "first.bin")
        let plan = try space.server.json("POST", "/v1/uploads",
                                         "{\"content\":\"\(second.content.hex)\",\"size\":\(second.size),\"blocks\":[\"\(second.digest.hex)\"]}")
        #expect(plan.status == 507, "\(plan.text)")
        #expect(plan.error?.error == "quota_exceeded")
        #expect(plan.error?.used == 150_000)
        #expect(plan.error?.quota == 200_000)
        #expect(plan.text.contains("150 KB used of its 200 KB quota"))
        let put = try space.server.send("PUT", "/v1/blocks/\(second.digest.hex)", headers: ["Expect:"], body: .bytes(second.bytes))
        #expect(put.status == 507, "\(put.text)")
        // Content the workspace holds costs nothing: linked at another path.
        try space.server.record(first, at: "copy.bin")
        #expect(try space.client.listFiles(prefix: "").count == 2)

        // Freed: deleted and collected, the upload goes through and reads back.
        try space.admin.delete(device: "test-device", path: "first.bin")
        try space.admin.delete(device: "test-device", path: "copy.bin")
        #expect(try space.collect(grace: 0).bytes == 150_000)
        // The server counts used bytes at most once a second: the plan goes through within a few.
        let deadline = Date().addingTimeInterval(10)
        while try space.server.json("POST", "/v1/uploads", "{\"content\":\"\(second.content.hex)\",\"size\":\(second.size),\"blocks\":[\"\(second.digest.hex)\"]}").status == 507,
              Date() < deadline { usleep(100_000) }
        try space.server.store(second, at: "second.bin")
        #expect(try space.readsBack(second))
        #expect(try space.collector.recordedQuota() == 200_000)
    }
}
