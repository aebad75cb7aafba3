import Testing
import Foundation
import TestSupport
import TestTraits

/// Tier three: an idle mounted device holds one request on the server, whatever it
/// follows. The workspace mirror's tree request carries the `Backups/` follower's cursor
/// (`records_since`), so it wakes for a backup made on another device too, and the
/// follower then reads the records without holding a request of its own. Real mounts,
/// a real `vdrive serve` (embedded, and two processes on PostgreSQL + SeaweedFS with one
/// device on each), and the server's access log, which names every request's device.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct OneHeldRequestEndToEndTests {
    /// Seconds the mounts' tree requests are held (`VDRIVE_MIRROR_HOLD`).
    static let hold = 15

    /// One line of the access log.
    struct Request: CustomStringConvertible {
        let device: String
        let method: String
        let route: String
        let milliseconds: Double
        /// Held until its wait ended: it ran for about the whole hold (nothing woke it).
        var heldToItsEnd: Bool { route == "/v1/tree" && milliseconds >= Double(OneHeldRequestEndToEndTests.hold - 1) * 1000 }
        var description: String { "\(method) \(route) \(milliseconds) ms" }
    }

    /// The requests of `device` in the server's access log, in order (each device talks to
    /// one server process, whose log keeps its order).
    static func requests(of device: String, _ server: LocalServer) -> [Request] {
        server.log().split(separator: "\n").compactMap(AccessLine.init).filter { $0.device == device }.map {
            Request(device: device, method: $0.method, route: $0.route, milliseconds: $0.milliseconds)
        }
    }

    /// Waits until `device` has `count` tree requests held to their end after `from` (an
    /// index in its requests); the index of the last.
    static func heldToTheirEnd(_ count: Int, of device: String, after from: Int, _ server: LocalServer, _ drives: [MountedDrive]) throws -> Int {
        var last = -1
        try WorkspaceMirrorEndToEndTests.waitFor("\(count) tree request(s) of \(device) held to their end", drives, within: Double(count * hold + 60)) {
            let held = requests(of: device, server).enumerated().filter { $0.offset > from && $0.element.heldToItsEnd }
            if held.count < count { return false }
            last = held[count - 1].offset
            return true
        }
        return last
    }

    @Test(arguments: Backend.allCases)
    func idleDevicesHoldOneRequestEachAndABackupWakesTheOthersTreeRequest(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-one-held"); defer { dir.remove() }
        let server = try LocalServer(folder: dir.path, device: "phone", backend: backend)
        defer { server.stop() }
        try server.addDevice("laptop", tokenFile: dir.path + "/laptop.token")
        let environment = ["VDRIVE_MIRROR_HOLD": String(Self.hold)]
        let phone = try MountedDrive(label: "vdrive-one-held-phone", arguments: server.mountArguments + ["--camera-backup"], environment: environment)
        defer { phone.stop() }
        let laptop = try MountedDrive(label: "vdrive-one-held-laptop", arguments: server.mountArguments(tokenFile: dir.path + "/laptop.token", process: 1),
                                      environment: environment)
        defer { laptop.stop() }
        let drives = [phone, laptop]

        // Something to mirror and a backed-up photo, synced, then quiet.
        try WorkspaceMirrorEndToEndTests.mkdir(phone.path("Docs"))
        try writeFile(phone.path("Docs/note.txt"), Array("draft".utf8))
        try writeFile(phone.path("Camera Roll/IMG_0001.jpg"), try BackupsEndToEndTests.fixture("IMG_0001.jpg", plus: "first"))
        try WorkspaceMirrorEndToEndTests.waitFor("the note and the photo on the laptop", drives) {
            FileManager.default.fileExists(atPath: laptop.path("Docs/note.txt"))
                && FileManager.default.fileExists(atPath: laptop.path("Backups/phone/2026/11/IMG_0001.jpg"))
        }

        // Idle: from a tree request of each device held to its end, the next two held
        // periods. Each device made exactly one request per period, its tree request: no
        // request of the records' feed, held or not.
        var lastIdle: [String: Int] = [:]
        for device in ["phone", "laptop"] {
            let first = try Self.heldToTheirEnd(1, of: device, after: -1, server, drives)
            let end = try Self.heldToTheirEnd(2, of: device, after: first, server, drives)
            let window = Array(Self.requests(of: device, server)[(first + 1)...end])
            print("OneHeldRequestEndToEndTests (\(backend)): \(device), two held periods of \(Self.hold) s: \(window)")
            #expect(window.count == 2 && window.allSatisfy { $0.method == "GET" && $0.route == "/v1/tree" },
                    "\(device) made \(window.count) requests in two held periods: \(window)")
            lastIdle[device] = end
        }

        // A photo backed up on the phone wakes the laptop's held tree request (through the
        // other server process on the scaled back end: NOTIFY); the laptop then reads the
        // records' feed, and Backups/ shows it.
        let from = try #require(lastIdle["laptop"])
        try writeFile(phone.path("Camera Roll/IMG_0002.jpg"), try BackupsEndToEndTests.fixture("IMG_0002.jpg", plus: "second"))
        try WorkspaceMirrorEndToEndTests.waitFor("the photo recorded on the server", drives) { server.hasRecord("Camera Roll/IMG_0002.jpg") }
        let recorded = Date()
        try WorkspaceMirrorEndToEndTests.waitFor("the photo in the laptop's Backups/", drives) {
            FileManager.default.fileExists(atPath: laptop.path("Backups/phone/2026/11/IMG_0002.jpg"))
        }
        print(String(format: "OneHeldRequestEndToEndTests (\(backend)): the photo appeared in the laptop's Backups/ %.0f ms after the server held its record",
                     Date().timeIntervalSince(recorded) * 1000))
        let after = Array(Self.requests(of: "laptop", server).dropFirst(from + 1))
        print("OneHeldRequestEndToEndTests (\(backend)): the laptop's requests since: \(after)")
        // The log has each line when its request ends, and a woken request's line may come
        // after the records' read it led to: judged by what the requests were, not their order.
        let changes = after.filter { $0.route == "/v1/changes" }
        #expect(!changes.isEmpty, "the laptop read the records' feed: \(after)")
        #expect(changes.allSatisfy { $0.milliseconds < 1000 }, "the records' feed read without holding: \(after)")
        #expect(after.allSatisfy { $0.route == "/v1/tree" || $0.route == "/v1/changes" }, "only the two feeds: \(after)")
        #expect(after.contains { $0.route == "/v1/tree" && !$0.heldToItsEnd }, "a tree request woken by the record before its end: \(after)")
    }
}
