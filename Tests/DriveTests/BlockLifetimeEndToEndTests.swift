import Testing
import Foundation
import Crypto
import Storage

/// A photo deleted and saved again, shared by several files, across a kill -9 and
/// remounts, with camera backup on, and read back the way users read: on this device
/// after a remount, on another device through `Backups/`, and with `vdrive restore`.
/// On the embedded server and on PostgreSQL + SeaweedFS.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct BlockLifetimeEndToEndTests {
    typealias E2E = BackupEndToEndTests
    typealias Backups = BackupsEndToEndTests

    @Test(arguments: zip([StoreKind.folder, .s3], ["sqlite", "postgresql"]))
    func aPhotoDeletedAndSavedAgainIsBackedUpAndReadsBackEverywhere(store: StoreKind, records: String) throws {
        let dir = TemporaryDirectory("vdrive-lifetime-e2e"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, device: "phone", store: store, records: records); defer { server.stop() }
        try server.addDevice("laptop", tokenFile: dir.path + "/laptop.token")
        let phone = try MountedDrive(label: "vdrive-lifetime-phone", arguments: server.mountArguments + ["--camera-backup"],
                                     environment: ["VDRIVE_COMMIT_WINDOW_MS": "1000"], start: false)
        defer { phone.stop() }
        let photo = try Backups.fixture("IMG_0001.jpg", plus: "deleted-and-saved-again")
        let sha = Backups.sha(photo)

        // Held while paused: saved, deleted, saved again, copied; then the mount is killed.
        #expect(try phone.vdrive(["pause"]).status == 0)
        try phone.startForeground()
        try writeFile(phone.path("Camera Roll/a.jpg"), photo)
        #expect(unlink(phone.path("Camera Roll/a.jpg")) == 0)
        try writeFile(phone.path("Camera Roll/a.jpg"), photo)
        try writeFile(phone.path("Camera Roll/b.jpg"), photo)
        try writeFile(phone.path("elsewhere.jpg"), photo)
        try BlockLifetimeMountTests.fsync(phone.path("elsewhere.jpg"))
        phone.kill9()
        var check = try BlockLifetimeMountTests.check(phone)
        #expect(check.status == 0, "vdrive check after the kill: \(check.stdout)")

        try phone.start()
        #expect(try phone.vdrive(["resume"]).status == 0)
        try E2E.waitForBackup(phone, done: 2)
        #expect(E2E.list(phone.path(".backup/failed")).isEmpty)
        for name in ["Camera Roll/a.jpg", "Camera Roll/b.jpg", "elsewhere.jpg"] {
            #expect(try readFile(phone.path(name)) == photo, "\(name) on the phone")
        }

        // Every copy deleted, then the same photo imported again under a new name: the
        // server has it (linked, not sent), and the drive keeps its block.
        for name in ["Camera Roll/a.jpg", "Camera Roll/b.jpg", "elsewhere.jpg"] { #expect(unlink(phone.path(name)) == 0) }
        try writeFile(phone.path("Camera Roll/c.jpg"), photo)
        try E2E.waitForBackup(phone, done: 3)
        try phone.unmount()
        check = try BlockLifetimeMountTests.check(phone)
        #expect(check.status == 0, "vdrive check after the unmount: \(check.stdout)")
        try phone.start()
        #expect(try readFile(phone.path("Camera Roll/c.jpg")) == photo, "c.jpg on the phone after a remount")

        // Another device reads it through Backups/, and a restore copies it.
        let laptop = try MountedDrive(label: "vdrive-lifetime-laptop",
                                      arguments: ["--server", server.url, "--token-file", dir.path + "/laptop.token"])
        defer { laptop.stop() }
        let backups = laptop.path("Backups/phone")
        try eventually("c.jpg in \(backups)", within: 20) {
            ((try? Backups.tree(backups)) ?? [:]).keys.contains { $0.hasSuffix("/c.jpg") }
        }
        let files = try Backups.tree(backups)
        let names = files.filter { $0.value.sha == sha }.map(\.key)
        #expect(names.contains { $0.hasSuffix("/c.jpg") } && names.contains { $0.hasSuffix("/a.jpg") }, "\(files.keys.sorted())")
        for name in names { #expect(try readFile(backups + "/" + name) == photo, "Backups/phone/\(name) read on the laptop") }

        let restored = dir.path + "/restored"
        let r = try laptop.vdrive(["restore", "phone", restored, "--now", "--server", server.url, "--token-file", dir.path + "/laptop.token"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try readFile(restored + "/Camera Roll/c.jpg") == photo, "restored c.jpg")
    }
}
