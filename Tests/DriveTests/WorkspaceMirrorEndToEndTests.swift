import Testing
import Foundation
import Crypto
import CLinux
import Storage
import TestSupport
import TestTraits

/// Tier three: the synced workspace. One real `vdrive serve` (embedded, and two processes
/// on PostgreSQL + SeaweedFS), real mounts each with its own state and token. Every change
/// goes up from one device and is read back, bytes compared, on another.
@Suite(.tags(.endToEnd), .needsMount, .serialized) struct WorkspaceMirrorEndToEndTests {
    /// Every name under a mount outside the Camera Roll and the generated trees:
    /// path → "folder", "file <sha256> <size> x<executable>" or "symlink <target>".
    static func snapshot(_ root: String) throws -> [String: String] { try workspaceSnapshot(root) }

    static func mkdir(_ path: String) throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false) }

    /// `environment`: more of the mounts' environment (the cache bound's interval).
    static func devices(_ dir: TemporaryDirectory, _ backend: Backend, _ names: [String],
                        environment more: [String: String] = [:]) throws -> (LocalServer, [MountedDrive]) {
        let server = try LocalServer(folder: dir.path, device: names[0], backend: backend)
        let environment = ["VDRIVE_MIRROR_HOLD": "20"].merging(more) { $1 }
        var drives: [MountedDrive] = []
        do {
            drives.append(try MountedDrive(label: "vdrive-mirror-\(names[0])", arguments: server.mountArguments,
                                           environment: environment))
            for (i, name) in names.enumerated().dropFirst() {
                try server.addDevice(name, tokenFile: dir.path + "/\(name).token")
                drives.append(try MountedDrive(label: "vdrive-mirror-\(name)",
                                               arguments: server.mountArguments(tokenFile: dir.path + "/\(name).token", process: i),
                                               environment: environment))
            }
        } catch {
            drives.forEach { $0.stop() }
            server.stop()
            throw error
        }
        return (server, drives)
    }

    /// The end of each mount's log, printed when a wait fails.
    static func printLogs(_ drives: [MountedDrive]) {
        for d in drives {
            for file in [d.state + "/vdrive.log", d.foregroundLog] {
                guard let log = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
                print("--- \(d.mountPoint) \(file.hasSuffix("vdrive.log") ? "log" : "foreground mount's stderr"):\n"
                      + log.split(separator: "\n").suffix(30).joined(separator: "\n"))
            }
            print("--- \(d.mountPoint) status: " + ((try? String(contentsOfFile: d.path(".backup/status"), encoding: .utf8)) ?? "(unreadable)"))
        }
    }

    /// `eventually`, printing the mounts' logs when it fails.
    static func waitFor(_ what: String, _ drives: [MountedDrive], within seconds: Double = 60, _ condition: () throws -> Bool) throws {
        do { try eventually(what, within: seconds, poll: 0.05, condition) } catch {
            printLogs(drives)
            throw error
        }
    }

    static func waitForSameTree(_ drives: [MountedDrive], within seconds: Double = 60) throws {
        var last: [[String: String]] = []
        do {
            try eventually("the same workspace on every device", within: seconds, poll: 0.1) {
                last = try drives.map { try snapshot($0.mountPoint) }
                return last.dropFirst().allSatisfy { $0 == last[0] }
            }
        } catch {
            for (d, tree) in zip(drives, last) { print("\(d.mountPoint): \(tree.sorted { $0.key < $1.key })") }
            printLogs(drives)
            throw error
        }
    }

    @Test(arguments: Backend.allCases)
    func aTreeGoesUpFromOneDeviceAndIsReadBackOnAnother(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-e2e"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])

        // Folders (an empty one too), a small file, a file of three blocks, a symlink,
        // an executable, a temporary file that stays local.
        let big = pseudoRandomBytes(9 << 20, seed: 25)
        try Self.mkdir(a.path("Docs"))
        try Self.mkdir(a.path("Docs/Empty"))
        try writeFile(a.path("Docs/note.txt"), Array("draft".utf8))
        try writeFile(a.path("Docs/video.mov"), big)
        try writeFile(a.path("run.sh"), Array("#!/bin/sh\necho hi\n".utf8))
        #expect(chmod(a.path("run.sh"), 0o755) == 0)
        #expect(symlink("Docs/note.txt", a.path("note-link")) == 0)
        try writeFile(a.path("Docs/note.txt.swp"), Array("swap".utf8))
        try Self.waitFor("the tree on the other device", drives) {
            FileManager.default.fileExists(atPath: b.path("Docs/video.mov")) && FileManager.default.fileExists(atPath: b.path("run.sh"))
                && FileManager.default.fileExists(atPath: b.path("Docs/Empty"))
        }
        // The way back: bytes read on the other device, fetched from the server.
        #expect(try readFile(b.path("Docs/video.mov")) == big)
        #expect(try readFile(b.path("Docs/note.txt")) == Array("draft".utf8))
        #expect(!FileManager.default.fileExists(atPath: b.path("Docs/note.txt.swp")))
        // A folder's time is each device's own: the empty one was made on this device just now.
        var folder = stat()
        #expect(stat(b.path("Docs/Empty"), &folder) == 0)
        #expect(abs(Double(folder.st_mtim.tv_sec) - Date().timeIntervalSince1970) < 120, "Docs/Empty on the other device: mtime \(folder.st_mtim.tv_sec)")
        var expected = try Self.snapshot(a.mountPoint)
        expected["Docs/note.txt.swp"] = nil
        #expect(try Self.snapshot(b.mountPoint) == expected)
        if unlink(a.path("Docs/note.txt.swp")) != 0 {
            let error = errno
            Self.printLogs(drives)
            Issue.record("unlink of a temporary file: errno \(error)")
        }

        // A rename of the folder goes as one change, with no bytes sent again.
        let written = server.bytesWritten()
        #expect(rename(a.path("Docs"), a.path("Papers")) == 0)
        try eventually("the rename on the other device", within: 30, poll: 0.05) {
            FileManager.default.fileExists(atPath: b.path("Papers/video.mov")) && !FileManager.default.fileExists(atPath: b.path("Docs"))
        }
        // The server writes its records and log lines; no 9 MiB of content again.
        #expect(server.bytesWritten() - written < 1 << 20)

        // Deleted on one device, saved again with the same bytes on the other: the same
        // content comes back whole (dedup: the server still has the blocks).
        try FileManager.default.removeItem(atPath: b.path("Papers/video.mov"))
        try eventually("the delete on the first device", within: 30, poll: 0.05) { !FileManager.default.fileExists(atPath: a.path("Papers/video.mov")) }
        try writeFile(b.path("Papers/again.mov"), big)
        try writeFile(b.path("Papers/copy.mov"), big)
        try eventually("the saved-again files on the first device", within: 30, poll: 0.05) {
            FileManager.default.fileExists(atPath: a.path("Papers/again.mov")) && FileManager.default.fileExists(atPath: a.path("Papers/copy.mov"))
        }
        #expect(try readFile(a.path("Papers/again.mov")) == big)
        #expect(try readFile(a.path("Papers/copy.mov")) == big)
        try Self.waitForSameTree(drives)

        // Across a remount of one and a kill -9 of the other: the same tree, read whole.
        try b.unmount()
        try b.start()
        try a.unmount()
        try a.startForeground()
        try writeFile(a.path("Papers/after-kill.txt"), Array("made before the kill".utf8))
        try eventually("the file made before the kill on the other device", within: 30, poll: 0.05) {
            FileManager.default.fileExists(atPath: b.path("Papers/after-kill.txt"))
        }
        a.kill9()
        try a.start()
        try Self.waitForSameTree(drives)
        #expect(try readFile(a.path("Papers/again.mov")) == big)
        #expect(try readFile(b.path("Papers/after-kill.txt")) == Array("made before the kill".utf8))
    }

    @Test(arguments: Backend.allCases)
    func offlineEditsOnBothSidesMergeKeepingBothVersionsAndADeletedFolderComesBackWithANewFile(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-conflicts"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        try Self.mkdir(a.path("Shared"))
        try writeFile(a.path("Shared/plan.txt"), Array("base".utf8))
        try writeFile(a.path("Shared/gone.txt"), Array("to be deleted here, edited there".utf8))
        try Self.mkdir(a.path("Old"))
        try writeFile(a.path("Old/a.txt"), Array("a".utf8))
        try Self.waitForSameTree(drives)

        // The server is down: both devices change the same things.
        server.stopServer()
        try writeFile(a.path("Shared/plan.txt"), Array("laptop's plan".utf8))
        try writeFile(b.path("Shared/plan.txt"), Array("desktop's plan".utf8))
        try FileManager.default.removeItem(atPath: a.path("Shared/gone.txt"))
        try writeFile(b.path("Shared/gone.txt"), Array("edited on the desktop".utf8))
        try FileManager.default.removeItem(atPath: a.path("Old"))
        try writeFile(b.path("Old/new.txt"), Array("added while it was deleted elsewhere".utf8))
        try writeFile(a.path("both.txt"), Array("made on the laptop".utf8))
        try writeFile(b.path("both.txt"), Array("made on the desktop".utf8))
        try Self.mkdir(a.path("Together"))
        try writeFile(a.path("Together/from-laptop.txt"), Array("the laptop's file".utf8))
        try Self.mkdir(b.path("Together"))
        try writeFile(b.path("Together/from-desktop.txt"), Array("the desktop's file".utf8))
        // What only a running mount knows, `vdrive status` (another process) says too.
        func status(_ d: MountedDrive) throws -> String { try d.vdrive(["status", "--state", d.state]).stdout }
        try Self.waitFor("vdrive status saying the laptop's changes wait for the server", drives) {
            try status(a).contains("to send · waiting for the workspace server")
        }
        try server.start()

        try Self.waitForSameTree(drives, within: 90)
        try Self.waitFor("vdrive status saying the workspace is up to date, and the conflict copies one device made", drives) {
            let lines = try drives.map(status)
            return lines.allSatisfy { $0.contains("Workspace: up to date") && !$0.contains("waiting") } && lines.contains { $0.contains("conflict cop") }
        }
        let tree = try Self.snapshot(a.mountPoint)
        func sha(_ text: String) -> String { SHA256Hasher.digest(Array(text.utf8)).hex }
        // Two edits of one file: one keeps the name, the other is a conflict copy beside it.
        let plans = tree.filter { $0.key.hasPrefix("Shared/plan") }
        #expect(plans.count == 2, "\(plans)")
        #expect(Set(plans.values.map { $0.split(separator: " ")[1] }) == [Substring(sha("laptop's plan")), Substring(sha("desktop's plan"))])
        #expect(plans.keys.contains("Shared/plan.txt"))
        #expect(plans.keys.contains { $0.hasPrefix("Shared/plan (conflict from ") && $0.hasSuffix(").txt") })
        // Edit against delete: the edit wins.
        #expect(try readFile(a.path("Shared/gone.txt")) == Array("edited on the desktop".utf8))
        // A folder deleted while a file was added to it: the file survives, its folder with it.
        #expect(try readFile(a.path("Old/new.txt")) == Array("added while it was deleted elsewhere".utf8))
        #expect(!FileManager.default.fileExists(atPath: a.path("Old/a.txt")))
        // One name made on both: both kept.
        #expect(tree.keys.filter { $0.hasPrefix("both") }.count == 2)
        // One folder made on both: one folder, each device's file in it, read on the other
        // (whichever device sent first, and whether the other heard of it before sending).
        try #require(tree.keys.filter { $0.hasPrefix("Together") }.sorted() == ["Together", "Together/from-desktop.txt", "Together/from-laptop.txt"])
        #expect(try readFile(b.path("Together/from-laptop.txt")) == Array("the laptop's file".utf8))
        #expect(try readFile(a.path("Together/from-desktop.txt")) == Array("the desktop's file".utf8))
        // Unmounted, the mount's line goes with it: `vdrive status` reads the catalog again.
        try b.unmount()
        #expect(!FileManager.default.fileExists(atPath: b.state + "/workspace-status"))
        #expect(try status(b).contains("Workspace: up to date"))
        #expect(try !status(b).contains("conflict cop"))
        // A failure the user must act on (the device's token revoked) is in the line too.
        let revoked = try runCommand(vdriveBinary, ["serve", "device", "revoke", "laptop", "--data", server.data] + server.databaseArguments)
        try #require(revoked.status == 0, "\(revoked.stderr)")
        try writeFile(a.path("after.txt"), Array("written after the revoke".utf8))
        try Self.waitFor("vdrive status saying the laptop's token was refused", [a]) {
            let line = try status(a)
            return line.contains("Workspace: 1 change to send · ") && line.contains(" · failing: the workspace server answered 401: device 'laptop' was revoked")
        }
    }

    /// Without a mount (the hourly `vdrive-sync.timer`), the sync task brings a drive up
    /// to date both ways, told nothing but its state folder: the server is the one its
    /// last mount noted there (the device has no remote.json). Up: a change made while
    /// the server was down; down: one made on the other device meanwhile.
    @Test(arguments: Backend.allCases)
    func theSyncTaskBringsAnUnmountedDriveUpToDateBothWays(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-task"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        try Self.mkdir(a.path("Notes"))
        try Self.waitFor("the folder on the other device", drives) { FileManager.default.fileExists(atPath: b.path("Notes")) }

        server.stopServer()
        let desktops = Array("written on the desktop while the server was down".utf8)
        try writeFile(b.path("Notes/from-desktop.txt"), desktops)
        try Self.waitFor("the desktop's change waiting for the server", [b]) {
            try b.vdrive(["status", "--state", b.state]).stdout.contains("to send · waiting for the workspace server")
        }
        try b.unmount()
        try server.start()
        let laptops = Array("written on the laptop while the desktop was away".utf8)
        try writeFile(a.path("Notes/from-laptop.txt"), laptops)
        try Self.waitFor("the laptop's file on the server", [a]) { try a.vdrive(["versions", a.path("Notes/from-laptop.txt")]).status == 0 }

        let task = try b.vdrive(["task", "run", "us.virtualdrive.sync", "--state", b.state])
        #expect(task.status == 0, "sync task: \(task.status) \(task.stderr)")
        #expect(task.stdout.contains("Workspace: up to date"), "\(task.stdout)")
        // Up: the desktop's file reaches the laptop, read back whole.
        try Self.waitFor("the desktop's file on the laptop", [a]) { FileManager.default.fileExists(atPath: a.path("Notes/from-desktop.txt")) }
        #expect(try readFile(a.path("Notes/from-desktop.txt")) == desktops)
        // Down: the laptop's file is in the desktop's catalog before it mounts again.
        let known = try b.vdrive(["versions", "Notes/from-laptop.txt", "--state", b.state, "--json"])
        #expect(known.status == 0 && known.stdout.contains("\"device\":\"laptop\""), "\(known.status) \(known.stdout) \(known.stderr)")
        try b.start()
        try Self.waitForSameTree(drives)
        #expect(try readFile(b.path("Notes/from-laptop.txt")) == laptops)
    }

    /// A node of the workspace has one place, so the synced workspace refuses a second
    /// name of a file (EPERM, as a file system without hard links answers), and a tool's
    /// fallback, a copy, reaches the other device; in the Camera Roll, which is not
    /// synced, links are made. What the workspace leaves out says so in its attribute:
    /// a name that is not UTF-8, a file in a folder with a temporary name.
    @Test(arguments: Backend.allCases)
    func hardLinksAreRefusedInTheWorkspaceAndWhatStaysLocalSaysSo(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-links"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        func linkErrno(_ from: String, _ to: String) -> Int32 { link(a.path(from), a.path(to)) == 0 ? 0 : errno }
        try Self.mkdir(a.path("Docs"))
        try writeFile(a.path("Docs/a.txt"), Array("one file, two names".utf8))
        #expect(linkErrno("Docs/a.txt", "Docs/b.txt") == EPERM)
        #expect(!FileManager.default.fileExists(atPath: a.path("Docs/b.txt")))
        try FileManager.default.createDirectory(atPath: a.path("Camera Roll/2024"), withIntermediateDirectories: true)
        try writeFile(a.path("Camera Roll/2024/IMG_1.jpg"), Array("a photo".utf8))
        #expect(linkErrno("Camera Roll/2024/IMG_1.jpg", "Camera Roll/2024/IMG_1 link.jpg") == 0)
        #expect(linkErrno("Camera Roll/2024/IMG_1.jpg", "Docs/IMG_1.jpg") == EPERM)
        #expect(linkErrno("Docs/a.txt", "Camera Roll/a.txt") == EPERM)
        // The fallback of `git clone` and others: a copy, synced as any file.
        try writeFile(a.path("Docs/b.txt"), try readFile(a.path("Docs/a.txt")))
        // Names that stay local: "résumé.txt" in Latin-1 (not UTF-8), and a tool's folder.
        let latin1 = Array(a.path("Docs/").utf8) + [0x72, 0xE9, 0x73, 0x75, 0x6D, 0xE9, 0x2E, 0x74, 0x78, 0x74]
        func withRawPath<T>(_ body: (UnsafePointer<CChar>) -> T) -> T {
            (latin1 + [0]).withUnsafeBufferPointer { p in p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count, body) }
        }
        let fd = withRawPath { open($0, O_CREAT | O_WRONLY, 0o644) }
        try #require(fd >= 0, "a file named in Latin-1: errno \(errno)")
        #expect(write(fd, "kept here", 9) == 9)
        close(fd)
        try Self.mkdir(a.path("Docs/build.part"))
        try writeFile(a.path("Docs/build.part/out.o"), Array("made by a tool".utf8))
        #expect(mkfifo(a.path("Docs/pipe"), 0o644) == 0)
        let latin1Target = [UInt8]([0x72, 0xE9, 0x73, 0x75, 0x6D, 0xE9, 0])
        #expect(latin1Target.withUnsafeBufferPointer { p in
            p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { symlink($0, a.path("Docs/old-link")) } } == 0)

        try Self.waitFor("the file and its copy on the other device", drives) {
            (try? readFile(b.path("Docs/a.txt"))) == Array("one file, two names".utf8) && (try? readFile(b.path("Docs/b.txt"))) == Array("one file, two names".utf8)
        }
        try Self.waitFor("both files synced here", drives) {
            xattr(a.path("Docs/a.txt"), "user.vdrive.sync") == "synced" && xattr(a.path("Docs/b.txt"), "user.vdrive.sync") == "synced"
        }
        var value = [UInt8](repeating: 0, count: 64)
        let n = withRawPath { vd_getxattr($0, "user.vdrive.sync", &value, value.count) }
        #expect(n == 8 && String(decoding: value.prefix(max(0, n)), as: UTF8.self) == "excluded")
        #expect(xattr(a.path("Docs/build.part/out.o"), "user.vdrive.sync") == "excluded")
        #expect(try Set(FileManager.default.contentsOfDirectory(atPath: b.path("Docs"))) == ["a.txt", "b.txt"])
        #expect(!FileManager.default.fileExists(atPath: b.path("Camera Roll/2024")))
        // Linux gives a fifo no `user.*` attribute: the list of what stays here says it,
        // with the name that is not UTF-8; temporary names and the Camera Roll are out by design.
        let notSynced = try String(contentsOfFile: a.path(".backup/not-synced"), encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(notSynced == [#"Docs/r\xe9sum\xe9.txt: the name is not UTF-8: rename it to sync it"#,
                              "Docs/pipe: a fifo, socket or device: special files stay on this device",
                              "Docs/old-link: a symlink whose target is not UTF-8: symlinks sync their target as text"], "\(notSynced)")
        #expect(try String(contentsOfFile: b.path(".backup/not-synced"), encoding: .utf8).isEmpty)
        // Nothing of it is a failure to send: the workspace is up to date.
        try Self.waitFor("the laptop's status up to date", drives) {
            (try? String(contentsOfFile: a.path(".backup/status"), encoding: .utf8))?.contains("Workspace: up to date") == true
        }
    }

    /// The workspace's content goes up on the backup's terms: paused, or on a battery under
    /// its threshold and not charging, a new file's bytes wait and the status says why,
    /// while a rename, which needs no bytes, goes; once lifted, the content follows.
    @Test(arguments: Backend.allCases)
    func pausedOrOnALowBatteryContentWaitsAndARenameGoes(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-hold"); defer { dir.remove() }
        // A battery at 15%, not charging; no nmcli on the PATH, so the fake sysfs decides.
        try BackupEndToEndTests.fakeSystem(dir.path + "/system", batteryPercent: 15, charging: false, tethered: false)
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"],
                                                environment: ["VDRIVE_SYSTEM_ROOT": dir.path + "/system", "PATH": "/nonexistent"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        func vdrive(_ arguments: [String]) throws {
            let r = try a.vdrive(arguments)
            try #require(r.status == 0, "vdrive \(arguments.joined(separator: " ")): \(r.stderr)")
        }
        func status() throws -> String { try a.vdrive(["status", "--state", a.state]).stdout }
        try vdrive(["settings", "battery-threshold", "10"])
        try Self.mkdir(a.path("Docs"))
        try writeFile(a.path("Docs/first.txt"), Array("sent before the pause".utf8))
        try Self.waitFor("the first file on the other device", drives) { FileManager.default.fileExists(atPath: b.path("Docs/first.txt")) }

        try vdrive(["pause"])
        let held = pseudoRandomBytes(300_000, seed: 77)
        try writeFile(a.path("Docs/held.bin"), held)
        #expect(rename(a.path("Docs/first.txt"), a.path("Docs/renamed.txt")) == 0)
        try Self.waitFor("the rename on the other device, and the new file's content held: paused", drives) {
            try FileManager.default.fileExists(atPath: b.path("Docs/renamed.txt")) && status().contains("1 change to send · paused")
        }
        #expect(!FileManager.default.fileExists(atPath: b.path("Docs/held.bin")))
        #expect(xattr(a.path("Docs/held.bin"), "user.vdrive.sync") == "pending")

        try vdrive(["settings", "battery-threshold", "20"])
        try vdrive(["resume"])
        try Self.waitFor("the content held for the battery", drives) { (try status()).contains("1 change to send · battery low (15%)") }
        #expect(!FileManager.default.fileExists(atPath: b.path("Docs/held.bin")))

        try vdrive(["settings", "battery-threshold", "10"])
        try Self.waitFor("the held file on the other device", drives) { (try? readFile(b.path("Docs/held.bin"))) == held }
        try Self.waitFor("the status up to date", drives) { (try status()).contains("Workspace: up to date") }
    }

    /// The user's patterns (`vdrive settings sync-exclude`), used from the next mount: a new
    /// name they match stays on this device (a folder with what is in it), a file another
    /// device sends under such a name syncs as any (a pattern deletes nothing), and
    /// without the pattern what it kept back goes up.
    @Test(arguments: Backend.allCases)
    func theUsersPatternsKeepNewNamesOnThisDeviceAndDeleteNothing(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-exclude"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        func settings(_ value: String) throws {
            let r = try a.vdrive(["settings", "sync-exclude", value])
            try #require(r.status == 0, "vdrive settings sync-exclude \(value): \(r.stderr)")
        }
        try writeFile(b.path("server.log"), Array("made where no pattern holds".utf8))
        try Self.waitFor("the desktop's log on the laptop", drives) { FileManager.default.fileExists(atPath: a.path("server.log")) }
        #expect(try a.vdrive(["settings", "sync-exclude", "build/out.o"]).status == 64, "a path is not a name pattern")
        try settings("*.log build")
        try a.unmount()
        try a.start()

        try writeFile(a.path("new.log"), Array("kept here".utf8))
        try Self.mkdir(a.path("build"))
        try writeFile(a.path("build/out.o"), Array("made by a tool".utf8))
        try writeFile(a.path("server.log"), Array("edited on the laptop".utf8))
        try writeFile(a.path("notes.txt"), Array("synced as ever".utf8))
        try Self.waitFor("the notes and the edited log on the desktop", drives) {
            (try? readFile(b.path("notes.txt"))) == Array("synced as ever".utf8)
                && (try? readFile(b.path("server.log"))) == Array("edited on the laptop".utf8)
        }
        #expect(!FileManager.default.fileExists(atPath: b.path("new.log")))
        #expect(!FileManager.default.fileExists(atPath: b.path("build")))
        #expect(xattr(a.path("new.log"), "user.vdrive.sync") == "excluded")
        #expect(xattr(a.path("build/out.o"), "user.vdrive.sync") == "excluded")
        #expect(xattr(a.path("server.log"), "user.vdrive.sync") == "synced")

        try settings("none")
        try a.unmount()
        try a.start()
        try Self.waitFor("what the patterns kept back, on the desktop", drives) {
            (try? readFile(b.path("new.log"))) == Array("kept here".utf8) && (try? readFile(b.path("build/out.o"))) == Array("made by a tool".utf8)
        }
    }

    /// Where each file stands, in its attribute and in the status line; and a large file
    /// whose upload is killed half-way resumes where the server has it.
    @Test(arguments: Backend.allCases)
    func eachFileSaysWhereItStandsAndAKilledUploadResumes(_ backend: Backend) throws {
        let dir = TemporaryDirectory("vdrive-mirror-state"); defer { dir.remove() }
        let (server, drives) = try Self.devices(dir, backend, ["laptop", "desktop"])
        defer { drives.forEach { $0.stop() }; server.stop() }
        let (a, b) = (drives[0], drives[1])
        let xattr = BackupEndToEndTests.xattr
        try writeFile(a.path("report.txt"), Array("final".utf8))
        try writeFile(a.path("draft.txt~"), Array("editor backup".utf8))
        try writeFile(a.path("Camera Roll/IMG_1.jpg"), Array("a photo".utf8))
        try Self.waitFor("the report on the other device", drives) { FileManager.default.fileExists(atPath: b.path("report.txt")) }
        try Self.waitFor("the report synced here", drives) { xattr(a.path("report.txt"), "user.vdrive.sync") == "synced" }
        // A small file is fetched ahead on the other device: held there without a read.
        try Self.waitFor("the report fetched ahead there", drives) { xattr(b.path("report.txt"), "user.vdrive.sync") == "synced" }
        #expect(try readFile(b.path("report.txt")) == Array("final".utf8))
        #expect(xattr(a.path("draft.txt~"), "user.vdrive.sync") == "excluded")
        #expect(xattr(a.path("Camera Roll/IMG_1.jpg"), "user.vdrive.sync") == "excluded")
        try Self.waitFor("the status says the workspace is up to date", drives) {
            (try? String(contentsOfFile: a.path(".backup/status"), encoding: .utf8))?.contains("Workspace: up to date") == true
        }
        // A folder moved out of the Camera Roll enters the workspace with what is in it
        // (whose own changes, made in the Camera Roll, were never the workspace's).
        try FileManager.default.createDirectory(atPath: a.path("Camera Roll/Trip/Day 1"), withIntermediateDirectories: true)
        try writeFile(a.path("Camera Roll/Trip/Day 1/IMG_2.jpg"), Array("a trip's photo".utf8))
        try writeFile(a.path("Camera Roll/Trip/notes.txt"), Array("the trip's notes".utf8))
        #expect(rename(a.path("Camera Roll/Trip"), a.path("Trip")) == 0)
        try Self.waitFor("the trip's photo and notes on the other device", drives) {
            (try? readFile(b.path("Trip/Day 1/IMG_2.jpg"))) == Array("a trip's photo".utf8)
                && (try? readFile(b.path("Trip/notes.txt"))) == Array("the trip's notes".utf8)
        }
        try Self.waitFor("the trip's photo synced here", drives) { xattr(a.path("Trip/Day 1/IMG_2.jpg"), "user.vdrive.sync") == "synced" }

        // With the server down, a change waits, and the status says so (never "up to date").
        server.stopServer()
        try writeFile(a.path("report.txt"), Array("final, edited offline".utf8))
        try Self.waitFor("the edit pending", drives) { xattr(a.path("report.txt"), "user.vdrive.sync") == "pending" }
        try Self.waitFor("the status shows the change waiting", drives) {
            (try? String(contentsOfFile: a.path(".backup/status"), encoding: .utf8))?.contains("Workspace: 1 change to send") == true
        }
        try server.start()
        try Self.waitFor("the offline edit on the other device", drives) {
            (try? readFile(b.path("report.txt"))) == Array("final, edited offline".utf8)
        }

        // A 48 MiB file, its upload killed half-way (kill -9 of the mount), then resumed.
        let big = pseudoRandomBytes(48 << 20, seed: 2512)
        try a.unmount()
        try a.startForeground()
        let mark = server.logMark()
        let blocksBefore = server.blockCount()
        try writeFile(a.path("big.bin"), big)
        try Self.waitFor("part of the file on the server", drives, within: 120) { server.blockCount() >= blocksBefore + 3 }
        a.kill9()
        try a.start()
        try Self.waitFor("the whole file on the other device", drives, within: 180) { FileManager.default.fileExists(atPath: b.path("big.bin")) }
        // A large one is online-only there until read.
        #expect(xattr(b.path("big.bin"), "user.vdrive.sync") == "online-only")
        #expect(try readFile(b.path("big.bin")) == big)
        // Resumed, not sent again from the start: the tus PATCHes the embedded server
        // received (its access log) hold the file once, plus at most the block cut by the
        // kill (a scaled server's blocks go to its store, PUT whole).
        if backend == .embedded {
            let received = server.accessLog(since: mark).filter(\.isBlockUpload).map(\.bytesIn).reduce(0, +)
            #expect(received >= 48 << 20 && received <= (48 << 20) + 2 * Int64(Blocks.size), "PATCHed \(received) bytes for a 48 MiB file")
        }
    }
}
