import Client
import Crypto
import Foundation
import Protocol
import Server
import Storage
import Testing

/// Revoking a device stops every credential it holds on the next request: its token,
/// its presigned tus URLs (also in another server process), and what its presigned S3
/// PUTs could make present. Other devices carry on.
@Suite(.tags(.endToEnd)) struct RevocationTests {
    /// A second device on `s`'s records, with its own client.
    static func secondDevice(_ s: TestServer, name: String = "tablet") throws -> (token: String, client: WorkspaceClient) {
        let token = try DeviceRegistry(dataDirectory: s.server.configuration.dataDirectory, database: s.database).add(name)
        return (token, WorkspaceClient(baseURL: s.base, token: token))
    }

    @Test(arguments: Records.all) func aRevokedDevicesTusURLStopsMidUploadAndOthersCarryOn(_ records: Records) throws {
        let s = try TestServer(records: records); defer { s.stop() }
        let tablet = try Self.secondDevice(s)
        let registry = try DeviceRegistry(dataDirectory: s.server.configuration.dataDirectory, database: s.database)
        let f = TestFile(in: s.dir.path, size: 1_000_000, seed: 41)
        let t = try s.ticket(f)
        #expect(t.url.contains("&device="))
        #expect(try s.patch(t.url, offset: 0, bytes: Array(f.bytes[0..<400_000])).status == 204)

        try registry.revoke("test-device")
        // The very next request on the URL is refused, naming the revocation; nothing moves.
        let patch = try s.patch(t.url, offset: 400_000, bytes: Array(f.bytes[400_000...]))
        #expect(patch.status == 403)
        #expect(patch.error?.error == "device_revoked")
        #expect(patch.error?.message.contains("device 'test-device' was revoked") == true, "\(patch.text)")
        #expect(try s.head(t.url).status == 403)
        #expect(try s.send("DELETE", t.url, headers: ["Tus-Resumable: 1.0.0"], auth: false).status == 403)
        // Its token too, with the same word.
        let bearer = try s.send("GET", "/v1/watermark")
        #expect(bearer.status == 401)
        #expect(bearer.error?.error == "device_revoked")
        // Nothing half-written is a block for anyone.
        let tabletAuth = "Authorization: Bearer \(tablet.token)"
        #expect(try s.send("HEAD", "/v1/blocks/\(f.digest.hex)", headers: [tabletAuth], auth: false).status == 404)

        // Another device is unaffected, also on the very upload the revoked one began:
        // its own URL resumes where the bytes stand and completes the block.
        guard case .blocks(let tickets, _) = try tablet.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks),
              let mine = tickets.first else { throw TestFailure("expected the block to upload") }
        #expect(mine.offset == 400_000)
        #expect(try s.patch(mine.url, offset: 400_000, bytes: Array(f.bytes[400_000...])).status == 204)
        #expect(try s.send("HEAD", "/v1/blocks/\(f.digest.hex)", headers: [tabletAuth], auth: false).status == 200)
        let g = TestFile(in: s.dir.path, size: Blocks.size + 10, seed: 42)
        let fd = g.open(); defer { close(fd) }
        try tablet.client.uploadFile(fd: fd, size: g.size)

        // A token issued again to the same name does not revive the old URLs.
        _ = try registry.add("test-device")
        let h = TestFile(in: s.dir.path, size: 5000, seed: 43)
        guard case .blocks(let late, _) = try tablet.client.createUpload(content: h.content, size: h.size, blocks: h.manifest.blocks),
              let lateTicket = late.first else { throw TestFailure("expected the block to upload") }
        #expect(try s.head(lateTicket.url).status == 200)
        let stale = try s.patch(t.url, offset: 0, bytes: Array(f.bytes[0..<10]))
        #expect(stale.status == 403)
        #expect(stale.error?.error == "device_revoked")
    }

    /// A URL without its device (or with the device altered) is refused: the device is signed.
    @Test func aURLWithoutOrWithAnotherDeviceIsRefused() throws {
        let s = try TestServer(); defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 3000, seed: 44)
        let t = try s.ticket(f)
        guard let range = t.url.range(of: "&device=") else { throw TestFailure("no device in \(t.url)") }
        let value = t.url[range.upperBound...].prefix { $0 != "&" }
        let without = t.url.replacingOccurrences(of: "&device=" + value, with: "")
        let withoutAnswer = try s.patch(without, offset: 0, bytes: f.bytes)
        #expect(withoutAnswer.status == 403, "the device is a signed part: \(withoutAnswer.text)")
        let other = t.url.replacingOccurrences(of: "&device=" + value, with: "&device=2." + value.split(separator: ".")[1])
        #expect(try s.patch(other, offset: 0, bytes: f.bytes).status == 403)
        #expect(try s.head(t.url).status == 200)
    }

    /// Two server processes on one PostgreSQL database and one SeaweedFS bucket: a device
    /// revoked while its presigned PUTs are out cannot make a block present through
    /// either process; the PUT URLs are short-lived; another device is unaffected.
    @Test(.enabled(if: PostgresCluster.isInstalled))
    func aRevokedDevicesStorePutsNeverBecomeBlocksInAnyProcess() throws {
        let store = try ScaledStoreTests.Store(); defer { store.stop() }
        let dir = store.dir.path
        let (database, backends) = try store.scaledBackends()
        let registry = try DeviceRegistry(dataDirectory: dir + "/data-a", database: .postgres(connectionString: database))
        let phoneToken = try registry.add("phone"), tabletToken = try registry.add("tablet")
        let a = try ServerProcess(data: dir + "/data-a", extra: backends); defer { a.kill() }
        let b = try ServerProcess(data: dir + "/data-b", extra: backends); defer { b.kill() }
        let phoneA = WorkspaceClient(baseURL: a.base, token: phoneToken), phoneB = WorkspaceClient(baseURL: b.base, token: phoneToken)
        let tabletB = WorkspaceClient(baseURL: b.base, token: tabletToken)
        let f = TestFile(in: dir, size: 2 * Blocks.size, seed: 45)
        let fd = f.open(); defer { close(fd) }

        guard case .blocks(let tickets, let expiresAt) = try phoneA.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected blocks to upload")
        }
        #expect(expiresAt <= Int64(time(nil)) + 15 * 60 + 5, "S3 PUT URLs live at most 15 minutes")
        // Block 0 PUT and verified through A before the revocation: a block.
        guard case .s3(let headers0) = tickets[0].kind, case .s3(let headers1) = tickets[1].kind else { throw TestFailure("not an S3 plan") }
        #expect(try HTTPConnection().perform(method: "PUT", url: tickets[0].url, headers: headers0 + ["Expect:"],
                                             body: .file(fd: fd, offset: 0, length: tickets[0].length)).status == 200)
        try phoneA.verifyBlock(tickets[0].hash)

        try registry.revoke("phone")
        // The store still takes the PUT (it knows nothing of devices), but neither process records it.
        #expect(try HTTPConnection().perform(method: "PUT", url: tickets[1].url, headers: headers1 + ["Expect:"],
                                             body: .file(fd: fd, offset: tickets[1].fileOffset, length: tickets[1].length)).status == 200)
        for client in [phoneB, phoneA] {
            do {
                try client.verifyBlock(tickets[1].hash)
                Issue.record("a revoked device verified a block")
            } catch {
                guard case .http(let status, let message) = error else { Issue.record("verify after revocation: \(error)"); continue }
                #expect(status == 401)
                #expect(message.contains("device 'phone' was revoked"))
            }
        }
        let tabletAuth = ["Authorization: Bearer \(tabletToken)"]
        let head = try HTTPConnection().perform(method: "HEAD", url: b.base + "/v1/blocks/\(tickets[1].hash.hex)", headers: tabletAuth)
        #expect(head.status == 404, "an object PUT by a revoked device is not a block")

        // The other device plans the block again, PUTs and verifies it itself.
        #expect(try ScaledStoreTests.plan(tabletB, f).map(\.index) == [1])
        try tabletB.uploadFile(fd: fd, size: f.size)
        #expect(try ScaledStoreTests.plan(tabletB, f).isEmpty)
    }
}
