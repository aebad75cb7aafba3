import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// Records keyed by (device, path), every version kept, deletion only by the admin.
@Suite(.tags(.endToEnd)) struct VersionTests {
    /// A record of `f` at `path` with a capture date.
    static func record(_ f: TestFile, _ path: String, sequence: Int64, capture: Int64? = 1_600_000_000, mtime: Int64 = 1_700_000_000) -> FileRecord {
        FileRecord(path: path, hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex), captureDate: capture, mtime: mtime, deviceSequence: sequence)
    }

    @Test(arguments: Records.all) func twoDevicesWithTheSameNamesKeepBoth(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let laptopToken = try DeviceRegistry(dataDirectory: s.server.configuration.dataDirectory, database: s.database).add("laptop")
        let phone = s.client  // "test-device"
        let laptop = WorkspaceClient(baseURL: s.base, token: laptopToken)
        // Different photos under the same names, plus one photo both have (a shared one),
        // one of them 2 blocks long.
        let p1 = try s.uploaded(size: 5 << 20, seed: 101), l1 = TestFile(in: s.dir.path, size: 5 << 20, seed: 102)
        let p2 = try s.uploaded(size: 3000, seed: 103), l2 = TestFile(in: s.dir.path, size: 4000, seed: 104)
        let shared = try s.uploaded(size: 70_000, seed: 105)
        for f in [l1, l2] { let fd = f.open(); defer { close(fd) }; try laptop.uploadFile(fd: fd, size: f.size) }
        let blocksBefore = s.blockCount()
        try phone.recordFile(Self.record(p1, "Camera Roll/IMG_0001.jpg", sequence: 1))
        try phone.recordFile(Self.record(p2, "Camera Roll/IMG_0002.jpg", sequence: 2))
        try phone.recordFile(Self.record(shared, "Camera Roll/shared.jpg", sequence: 3))
        try laptop.recordFile(Self.record(l1, "Camera Roll/IMG_0001.jpg", sequence: 1))
        try laptop.recordFile(Self.record(l2, "Camera Roll/IMG_0002.jpg", sequence: 2))
        // The laptop's copy of the shared photo: present already, so no block list and nothing sent.
        #expect(try laptop.createUpload(content: shared.content, size: shared.size, blocks: shared.manifest.blocks) == .present)
        try laptop.recordFile(FileRecord(path: "Camera Roll/shared.jpg", hash: shared.content.hex, size: shared.size, captureDate: 1_600_000_000, mtime: 1, deviceSequence: 3))
        #expect(s.blockCount() == blocksBefore)  // nothing stored twice
        #expect(s.blockCount() == 2 + 1 + 2 + 1 + 1)

        let all = try phone.listFiles(prefix: "Camera Roll/")
        #expect(all.map { "\($0.device!):\($0.path)" } == [
            "laptop:Camera Roll/IMG_0001.jpg", "laptop:Camera Roll/IMG_0002.jpg", "laptop:Camera Roll/shared.jpg",
            "test-device:Camera Roll/IMG_0001.jpg", "test-device:Camera Roll/IMG_0002.jpg", "test-device:Camera Roll/shared.jpg"])
        #expect(all.allSatisfy { $0.recordedAt != nil })
        #expect(try laptop.listFiles(device: "test-device", prefix: "").map(\.hash) == [p1, p2, shared].map(\.content.hex))
        #expect(try phone.listFiles(device: "laptop", prefix: "").map(\.hash) == [l1, l2, shared].map(\.content.hex))
        // Paging across devices: the cursor is DEVICE/PATH.
        #expect(try phone.listFiles(prefix: "", pageSize: 2) == all)
        let page = try phone.filesPage(prefix: "", limit: 2)
        #expect(page.next == "laptop/Camera Roll/IMG_0002.jpg")
        #expect(try phone.filesPage(device: "laptop", prefix: "", limit: 2).next == "Camera Roll/IMG_0002.jpg")
        #expect(try phone.listFiles(device: "nobody", prefix: "").isEmpty)
        // A bare DEVICE as the cursor starts at that device's first file.
        #expect(try phone.filesPage(prefix: "", after: "test-device", limit: 1).files.map(\.path) == ["Camera Roll/IMG_0001.jpg"])
        #expect(try phone.filesPage(prefix: "", after: "test-device", limit: 1).files.first?.device == "test-device")
        // Each device's photo downloads as its own bytes.
        for (device, f) in [("test-device", p1), ("laptop", l1)] {
            let record = try phone.fileVersions(device: device, path: "Camera Roll/IMG_0001.jpg")
            #expect(record.map(\.hash) == [f.content.hex])
            let out = s.dir.path + "/out-" + device
            let fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0o600)
            defer { close(fd) }
            try phone.download(content: SHA256Digest(hex: record[0].hash)!, to: fd)
            #expect(FileManager.default.contents(atPath: out) == Data(f.bytes))
        }
        // The change feed has every record with its device.
        let feed = try phone.changes(since: 0).records
        #expect(feed.count == 6)
        #expect(feed.map { $0.device! } == ["test-device", "test-device", "test-device", "laptop", "laptop", "laptop"])
    }

    @Test(arguments: Records.all) func aNewHashKeepsTheOldVersion(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let v1 = try s.uploaded(size: 1000, seed: 111), v2 = try s.uploaded(size: 2000, seed: 112)
        let path = "Camera Roll/IMG_0001.jpg"
        let r1 = try s.client.recordFile(Self.record(v1, path, sequence: 1, capture: 1_500_000_000))
        let r2 = try s.client.recordFile(Self.record(v2, path, sequence: 2, capture: nil, mtime: 1_700_000_100))
        #expect(r2.sequence! > r1.sequence!)
        var versions = try s.client.fileVersions(device: "test-device", path: path)
        #expect(versions.map(\.hash) == [v1.content.hex, v2.content.hex])
        #expect(versions.map(\.captureDate) == [1_500_000_000, nil])
        #expect(versions.map(\.sequence) == [r1.sequence, r2.sequence])
        #expect(try s.client.listFiles(prefix: "").map(\.hash) == [v2.content.hex])  // the current one
        // Back to the first content: a third version; the earlier two stay.
        try s.client.recordFile(Self.record(v1, path, sequence: 3, mtime: 1_700_000_200))
        versions = try s.client.fileVersions(device: "test-device", path: path)
        #expect(versions.map(\.hash) == [v1.content.hex, v2.content.hex, v1.content.hex])
        // The same content again with a new mtime: the same version, moved to the end of the feed.
        let third = versions.last!.sequence!
        let touched = try s.client.recordFile(Self.record(v1, path, sequence: 4, mtime: 1_700_000_300))
        #expect(touched.sequence == third + 1)  // the newest, moved: its old sequence is not reused
        versions = try s.client.fileVersions(device: "test-device", path: path)
        #expect(versions.count == 3)
        #expect(versions.last?.mtime == 1_700_000_300)
        #expect(versions.last?.sequence == touched.sequence)
        let feed = try s.client.changes(since: 0).records
        #expect(feed.map(\.hash) == [v1.content.hex, v2.content.hex, v1.content.hex])
        #expect(feed.last?.sequence == touched.sequence)
        // Every version downloads by its hash.
        for v in [v1, v2] { #expect(try discarding { try s.client.download(content: v.content, to: $0) } == v.size) }
        // Errors: unknown path 404, missing device 400, bad path 400.
        #expect(throws: ClientError.notFound) { try s.client.fileVersions(device: "test-device", path: "nope.jpg") }
        #expect(try s.send("GET", "/v1/files/versions?path=x").error?.field == "device")
        #expect(try s.send("GET", "/v1/files/versions?device=test-device&path=..%2Fx").error?.field == "path")
        #expect(try s.send("GET", "/v1/files?device=a%2Fb").error?.field == "device")
        #expect(try s.send("GET", "/v1/files/versions?device=&path=x").error?.field == "device")
        #expect(try s.send("POST", "/v1/files/versions").status == 405)
    }

    @Test(arguments: Records.all) func onlyTheAdminDeletesVersions(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let v1 = try s.uploaded(size: 1000, seed: 121), v2 = try s.uploaded(size: 2000, seed: 122), other = try s.uploaded(size: 3000, seed: 123)
        let path = "Camera Roll/IMG_0001.jpg"
        try s.client.recordFile(Self.record(v1, path, sequence: 1))
        try s.client.recordFile(Self.record(v2, path, sequence: 2))
        try s.client.recordFile(Self.record(other, "Camera Roll/other.jpg", sequence: 3))
        let admin = try BackupAdmin(dataDirectory: s.server.configuration.dataDirectory, database: s.database)
        #expect(throws: BackupAdmin.Failure.unknownDevice("nobody")) { try admin.versions(device: "nobody", path: path) }
        #expect(throws: BackupAdmin.Failure.noSuchPath(device: "test-device", path: "x.jpg")) { try admin.delete(device: "test-device", path: "x.jpg") }
        #expect(throws: BackupAdmin.Failure.noSuchVersion(device: "test-device", path: path, hash: other.content.hex)) {
            try admin.delete(device: "test-device", path: path, version: other.content.hex)
        }
        // Deleting the current version makes the older one current.
        let gone = try admin.delete(device: "test-device", path: path, version: v2.content.hex)
        #expect(gone.map(\.hash) == [v2.content.hex])
        #expect(gone.first?.isCurrent == true)
        #expect(try s.client.fileVersions(device: "test-device", path: path).map(\.hash) == [v1.content.hex])
        #expect(try s.client.listFiles(prefix: "").map(\.hash) == [v1.content.hex, other.content.hex])
        // Deleting the path: every version goes; the other file stays. Contents stay downloadable.
        #expect(try admin.delete(device: "test-device", path: path).map(\.hash) == [v1.content.hex])
        #expect(try s.client.listFiles(prefix: "").map(\.path) == ["Camera Roll/other.jpg"])
        #expect(throws: ClientError.notFound) { try s.client.fileVersions(device: "test-device", path: path) }
        #expect(try discarding { try s.client.download(content: v2.content, to: $0) } == v2.size)
        // A sequence is never handed out twice, even after the newest version was deleted.
        let before = try s.client.changes(since: 0).nextSequence
        try admin.delete(device: "test-device", path: "Camera Roll/other.jpg")
        let again = try s.client.recordFile(Self.record(other, "Camera Roll/other.jpg", sequence: 4))
        #expect(again.sequence! > before)
    }

    /// A follower of the feed (a drive's `Backups/`) learns the administrator's deletions
    /// from the feed itself, in sequence order with new versions, across page cuts.
    @Test(arguments: Records.all) func deletionsAreInTheChangeFeed(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let v1 = try s.uploaded(size: 1000, seed: 131), v2 = try s.uploaded(size: 2000, seed: 132)
        let path = "Camera Roll/IMG_0001.jpg"
        let r1 = try s.client.recordFile(Self.record(v1, path, sequence: 1))
        let r2 = try s.client.recordFile(Self.record(v2, path, sequence: 2))
        let cursor = try s.client.changesPage(since: 0).nextSequence
        #expect(cursor == r2.sequence)
        let admin = try BackupAdmin(dataDirectory: s.server.configuration.dataDirectory, database: s.database)
        try admin.delete(device: "test-device", path: path, version: v2.content.hex)
        let r3 = try s.client.recordFile(Self.record(v2, "Camera Roll/later.jpg", sequence: 3))
        let page = try s.client.changesPage(since: cursor)
        #expect(page.deletions?.map(\.version) == [r2.sequence!])
        #expect(page.deletions?.first?.device == "test-device" && page.deletions?.first?.path == path && page.deletions?.first?.hash == v2.content.hex)
        #expect(page.changes.map(\.sequence) == [r3.sequence])
        let deletion = try #require(page.deletions?.first?.sequence)
        #expect(deletion > cursor && deletion < r3.sequence!, "a deletion takes its own sequence, never reused")
        #expect(page.nextSequence == r3.sequence)
        // A page of one entry stops at the deletion; the next one goes on after it.
        let first = try s.client.changesPage(since: cursor, limit: 1)
        #expect(first.changes.isEmpty && first.deletions?.count == 1 && first.nextSequence == deletion)
        let second = try s.client.changesPage(since: first.nextSequence, limit: 1)
        #expect(second.changes.map(\.sequence) == [r3.sequence] && second.deletions?.isEmpty == true)
        // The feed from 0 holds what is left: v1 and the later record, and the deletion.
        let all = try s.client.changesPage(since: 0)
        #expect(all.changes.map(\.sequence) == [r1.sequence, r3.sequence] && all.deletions?.count == 1)
        // Every page says where the feed ends, whatever its `since` (a follower past it
        // knows the server forgot part of its feed).
        for p in [page, first, second, all] { #expect(p.latestSequence == r3.sequence) }
        #expect(try s.client.changesPage(since: r3.sequence! + 100).latestSequence == r3.sequence)
    }

    /// Every page names the workspace: the same from every server process on the same
    /// records (the scaled setup, or a restart), another for other records (a reset
    /// server, or another workspace at the same address), so a drive can tell.
    @Test(arguments: Records.all) func everyPageNamesTheWorkspace(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let id = try #require(try s.client.changesPage(since: 0).workspace)
        #expect(id.utf8.count == 32 && id.utf8.allSatisfy(Hex.isHexDigit) && id == id.lowercased())
        let second = try WorkspaceServer(ServerConfiguration(dataDirectory: s.server.configuration.dataDirectory, host: "127.0.0.1", port: 0,
                                                             database: s.database))
        defer { second.stop() }
        #expect(try WorkspaceClient(baseURL: second.baseURL, token: s.token).changesPage(since: 5).workspace == id)
        let other = try TestServer(records: records)
        defer { other.stop() }
        #expect(try other.client.changesPage(since: 0).workspace != id)
    }

    @Test(arguments: Records.all) func adminVerbRefusesWithoutYes(_ records: Records) throws {
        let s = try TestServer(records: records)
        defer { s.stop() }
        let v1 = try s.uploaded(size: 1000, seed: 131)
        try s.client.recordFile(Self.record(v1, "Camera Roll/a b.jpg", sequence: 1))
        let data = s.server.configuration.dataDirectory
        let (dry, dryOut, dryErr) = try run(vdriveBinary(), ["serve", "backup", "delete", "test-device", "Camera Roll/a b.jpg", "--data", data] + Records.arguments(s.database))
        #expect(dry == 64)
        #expect(dryOut.contains("would delete test-device\tCamera Roll/a b.jpg\t\(v1.content.hex)"))
        #expect(dryErr.contains("nothing deleted: add --yes"))
        #expect(try s.client.listFiles(prefix: "").count == 1)
        let (bad, _, badErr) = try run(vdriveBinary(), ["serve", "backup", "delete", "laptop", "x", "--data", data, "--yes"] + Records.arguments(s.database))
        #expect(bad == 65)
        #expect(badErr.contains("no device named 'laptop'"))
        let (ok, out, _) = try run(vdriveBinary(), ["serve", "backup", "delete", "test-device", "Camera Roll/a b.jpg", "--data", data, "--yes", "--version", v1.content.hex] + Records.arguments(s.database))
        #expect(ok == 0)
        #expect(out.hasPrefix("deleted test-device"))
        #expect(try s.client.listFiles(prefix: "").isEmpty)
    }

    /// A database from before per-device records (`server-002-blocks` applied, one record
    /// per path): every record it still holds becomes its device's current version, with
    /// its sequence; new versions then keep the old ones.
    @Test func migrationMovesRecordsToTheirDevices() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let photo = TestFile(in: dir.path, size: 3000, seed: 141), other = TestFile(in: dir.path, size: 4000, seed: 142)
        let newer = TestFile(in: dir.path, size: 5000, seed: 143)
        do {
            let old = try MigrationTests.OldFolder(data)
            try old.db.run("INSERT INTO devices(name, token_hash, created_at) VALUES ('laptop', NULL, 1700000000)")
            for f in [photo, other] { try old.blob(f) }
            try old.file("Camera Roll/IMG_0001.jpg", photo, sequence: 7)  // device 1: phone
            try old.file("Camera Roll/IMG_0002.jpg", other, sequence: 9)
            try old.db.run("UPDATE files SET device_id = 2 WHERE sequence = 9")  // the laptop recorded this one
        }
        let server = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: MigrationTests.OldFolder.token)
        let files = try client.listFiles(prefix: "")
        #expect(files.map { "\($0.device!):\($0.path):\($0.sequence!)" } == ["laptop:Camera Roll/IMG_0002.jpg:9", "phone:Camera Roll/IMG_0001.jpg:7"])
        #expect(files.allSatisfy { $0.recordedAt == nil })
        #expect(try client.changes(since: 0).records.map(\.sequence) == [7, 9])
        #expect(try client.fileVersions(device: "phone", path: "Camera Roll/IMG_0001.jpg").map(\.hash) == [photo.content.hex])
        // A new version after the migration keeps the migrated one and follows the old sequences.
        let fd = newer.open()
        defer { close(fd) }
        try client.uploadFile(fd: fd, size: newer.size)
        let r = try client.recordFile(Self.record(newer, "Camera Roll/IMG_0001.jpg", sequence: 10))
        #expect(r.sequence == 10)
        #expect(try client.fileVersions(device: "phone", path: "Camera Roll/IMG_0001.jpg").map(\.hash) == [photo.content.hex, newer.content.hex])
        // The phone's IMG_0002 does not replace the laptop's.
        try client.recordFile(Self.record(other, "Camera Roll/IMG_0002.jpg", sequence: 11))
        #expect(try client.listFiles(prefix: "Camera Roll/IMG_0002").map(\.device) == ["laptop", "phone"])
        let db = try Database(path: data + "/server.db")
        #expect(try db.appliedMigrations() == ["server-001-initial", "server-002-blocks", "server-003-versions", "server-004-block-chunks", "server-005-deletions", "server-006-space", "server-007-tree"])
    }
}
