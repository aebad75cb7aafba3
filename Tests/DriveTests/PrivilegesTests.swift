import Testing
import Foundation
@testable import Drive
import CLinux

/// Setuid, setgid and file capabilities on change (Sources/Drive/Privileges.swift): the
/// rules alone, then on a real mount where the kernel leaves them to the drive
/// (FUSE_HANDLE_KILLPRIV_V2), with writers that are and are not root.
@Suite(.tags(.mount), .needsMount, .serialized) struct PrivilegesTests {
    @Test func theKernelsRules() {
        // A writer who is not root: setuid goes; setgid goes only with group execute.
        #expect(Privileges.modeAfterChange(0o6755, ownerChanged: false, callerUid: 1000) == 0o0755)
        #expect(Privileges.modeAfterChange(0o2765, ownerChanged: false, callerUid: 1000) == nil)
        #expect(Privileges.modeAfterChange(0o6745, ownerChanged: false, callerUid: 1000) == 0o2745)
        #expect(Privileges.modeAfterChange(0o0755, ownerChanged: false, callerUid: 1000) == nil)
        // Root (CAP_FSETID) keeps them on write and truncate, not on chown.
        #expect(Privileges.modeAfterChange(0o6755, ownerChanged: false, callerUid: 0) == nil)
        #expect(Privileges.modeAfterChange(0o6755, ownerChanged: true, callerUid: 0) == 0o0755)
        #expect(Privileges.modeAfterChange(0o104755, ownerChanged: true, callerUid: 0) == 0o0755)
    }

    @Test func writesTruncatesAndChownsClearThemOnAMount() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let file = drive.path("tool")
        try Data("#!/bin/sh\n".utf8).write(to: URL(fileURLWithPath: file))
        func mode() -> UInt32 { var st = stat(); stat(file, &st); return UInt32(st.st_mode) & 0o7777 }
        func asNobody(_ script: String) throws {
            let r = try runCommand("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", script])
            #expect(r.status == 0, "\(script): \(r.stderr)")
        }

        chmod(file, 0o6777)
        try asNobody("echo more >> '\(file)'")
        #expect(mode() == 0o0777, "a write by another user clears setuid and setgid")

        chmod(file, 0o2767)
        try asNobody("echo more >> '\(file)'")
        #expect(mode() == 0o2767, "setgid without group execute stays")

        chmod(file, 0o6777)
        try asNobody("truncate -s 3 '\(file)'")
        #expect(mode() == 0o0777, "a truncate by another user clears them")

        chmod(file, 0o6755)
        let fd = open(file, O_WRONLY | O_APPEND)
        #expect(fd >= 0)
        _ = "x".withCString { write(fd, $0, 1) }
        close(fd)
        #expect(mode() == 0o6755, "root keeps them on write")

        #expect(chown(file, 1, 1) == 0)
        #expect(mode() == 0o0755, "a change of owner clears them, even by root")

        // A file capability (v2: cap_net_bind_service permitted) goes with the next write.
        var cap: [UInt8] = [0, 0, 0, 2, 0, 4, 0, 0] + [UInt8](repeating: 0, count: 12)
        #expect(vd_setxattr(file, "security.capability", &cap, cap.count, 0) == 0, "setxattr: errno \(errno)")
        #expect(vd_getxattr(file, "security.capability", nil, 0) == cap.count)
        let fd2 = open(file, O_WRONLY | O_APPEND)
        _ = "y".withCString { write(fd2, $0, 1) }
        close(fd2)
        #expect(vd_getxattr(file, "security.capability", nil, 0) == -1 && errno == ENODATA, "the capability is removed by a write")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "#!/xy")
    }

    /// The kernel took FUSE_HANDLE_KILLPRIV_V2: it asks for `security.capability` once per
    /// file, not before each of its writes (the request log of a debug mount).
    @Test func theKernelAsksOncePerFileNotPerWrite() throws {
        let dir = TemporaryDirectory("vdrive-killpriv")
        defer { dir.remove() }
        let mnt = dir.path + "/mnt"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: vdriveBinary)
        p.arguments = ["mount", mnt, "--state", dir.path + "/state", "-f"]
        p.environment = ProcessInfo.processInfo.environment.merging(["VDRIVE_FUSE_DEBUG": "1", "XDG_CONFIG_HOME": dir.path + "/config",
                                                                      "XDG_DATA_HOME": dir.path + "/data", "XDG_RUNTIME_DIR": dir.path + "/run"]) { $1 }
        #expect(FileManager.default.createFile(atPath: dir.path + "/log", contents: nil))
        p.standardError = FileHandle(forWritingAtPath: dir.path + "/log")
        p.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try p.run()
        defer {
            if isMounted(mnt) { _ = try? runCommand("/bin/fusermount3", ["-u", mnt]) }
            p.waitUntilExit()
        }
        try eventually("the mount at \(mnt) is ready", within: 5, poll: 0.025) { isMounted(mnt) }

        let fd = open(mnt + "/four-writes", O_CREAT | O_WRONLY, 0o644)
        try #require(fd >= 0)
        for _ in 0..<4 { _ = "0123456789".withCString { write(fd, $0, 10) } }
        close(fd)
        _ = try runCommand("/bin/fusermount3", ["-u", mnt])
        p.waitUntilExit()
        let log = try String(contentsOfFile: dir.path + "/log", encoding: .utf8)
        let writes = log.components(separatedBy: "opcode: WRITE").count - 1
        let lookups = log.components(separatedBy: "opcode: GETXATTR").count - 1
        #expect(writes == 4)
        #expect(lookups <= 1, "\(lookups) security.capability lookups for \(writes) writes")
    }
}
