import Testing
import Foundation
import Crypto
import Storage

/// A workspace at its quota: the phone's photos that do not fit wait (never failed),
/// its status says the server is full, and once the server has room they go up by
/// themselves and come back whole. On the embedded server and on the scaled one.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct QuotaEndToEndTests {
    typealias E2E = BackupEndToEndTests

    @Test(arguments: Backend.allCases)
    func photosOverTheQuotaWaitAndGoUpOnceThereIsRoom(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-quota"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, device: "phone", backend: backend); defer { server.stop() }
        server.stopServer()
        server.serveArguments = ["--quota", "700K"]
        try server.start()
        let phone = try MountedDrive(label: "vdrive-quota-phone", arguments: server.mountArguments + ["--camera-backup"])
        defer { phone.stop() }

        // Three photos of 300 KB: two fit in 700 KiB, the third does not.
        let photos = (0..<3).map { pseudoRandomBytes(300_000, seed: 7001 + 2 * UInt64($0)) }   // odd seeds: the generator sets the low bit
        for (i, bytes) in photos.enumerated() { try writeFile(phone.path("Camera Roll/IMG_\(i).jpg"), bytes) }
        // status.json read once per look, so what is checked below is one moment's status.
        var json = ""
        do {
            try eventually("the status saying the server is full", within: 90) {
                json = (try? String(contentsOfFile: phone.state + "/status.json", encoding: .utf8)) ?? ""
                return json.contains("\"waitingCode\" : \"server-full\"") && E2E.list(phone.path(".backup/done")).count == 2
            }
        } catch {
            throw TestFailure("\(error); status: \(E2E.status(phone)); done: \(E2E.list(phone.path(".backup/done")))")
        }
        #expect(json.contains("the workspace server is full") && json.contains("quota"), "status.json carries the server's figures: \(json)")
        #expect(E2E.list(phone.path(".backup/failed")).isEmpty, "a photo over the quota waits; it never fails")
        #expect(E2E.list(phone.path(".backup/pending")).count == 1)

        // The administrator raises the quota: the waiting photo goes up by itself.
        server.stopServer()
        server.serveArguments = ["--quota", "10M"]
        try server.start()
        try E2E.waitForBackup(phone, done: 3, seconds: 120)
        #expect(E2E.status(phone).hasPrefix("Up to date · 3 photos and videos"), "\(E2E.status(phone))")

        let restored = dir.path + "/restored"
        let r = try phone.vdrive(["restore", "phone", restored, "--now", "--server", server.url, "--token-file", server.tokenFile])
        #expect(r.status == 0, "\(r.stderr)")
        for (i, bytes) in photos.enumerated() {
            #expect(try readFile(restored + "/Camera Roll/IMG_\(i).jpg") == bytes, "IMG_\(i).jpg restored")
        }
    }
}
