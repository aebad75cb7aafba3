import Testing
import Foundation
import Storage

/// Bad input at mount time: one clear line naming the path, a sysexits code, nothing overwritten.
@Suite(.tags(.mount), .needsMount) struct MountErrorTests {
    func mount(_ args: [String], in dir: TemporaryDirectory) throws -> CommandResult {
        try runCommand(vdriveBinary, ["mount"] + args, environment: ["XDG_DATA_HOME": dir.path + "/xdg", "XDG_RUNTIME_DIR": dir.path + "/run"])
    }

    func expectOneLine(_ r: CommandResult, code: Int32, mentions: String) {
        #expect(r.status == code, "exit \(r.status): \(r.stderr)")
        let lines = r.stderr.split(separator: "\n")
        #expect(lines.count == 1, "stderr: \(r.stderr)")
        #expect(r.stderr.contains(mentions), "stderr: \(r.stderr)")
        #expect(r.stderr.hasPrefix("vdrive: "))
    }

    @Test func missingMountPoint() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        expectOneLine(try mount([dir.path + "/nope", "--state", dir.path + "/s"], in: dir), code: 66, mentions: dir.path + "/nope")
    }

    @Test func mountPointIsAFile() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        #expect(FileManager.default.createFile(atPath: dir.path + "/file", contents: Data("x".utf8)))
        expectOneLine(try mount([dir.path + "/file", "--state", dir.path + "/s"], in: dir), code: 66, mentions: "not a folder")
    }

    /// Into a file (as the background mount's log) a line starts with its UTC time; to a
    /// pipe (a terminal, the journal) it does not (the test above).
    @Test func aLineIntoAFileStartsWithItsTime() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let log = dir.path + "/err.log"
        let r = try runCommand("/bin/sh", ["-c", "exec \"$0\" mount \"$1\" --state \"$2\" 2>\"$3\"", vdriveBinary, dir.path + "/nope", dir.path + "/s", log],
                               environment: ["XDG_DATA_HOME": dir.path + "/xdg", "XDG_RUNTIME_DIR": dir.path + "/run"])
        #expect(r.status == 66)
        let line = try #require(FileManager.default.contents(atPath: log).map { String(decoding: $0, as: UTF8.self) })
        let stamp = try #require(line.split(separator: " ", maxSplits: 1).first.map(String.init))
        let shape = stamp.map { $0.isNumber ? "9" : String($0) }.joined()
        #expect(shape == "9999-99-99T99:99:99.999Z", "\(line)")
        #expect(line.dropFirst(stamp.count + 1).hasPrefix("vdrive: mount point \(dir.path)/nope does not exist"), "\(line)")
    }

    @Test func stateFolderCannotBeCreated() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        mkdir(dir.path + "/mnt", 0o755)
        #expect(FileManager.default.createFile(atPath: dir.path + "/statefile", contents: Data("x".utf8)))
        expectOneLine(try mount([dir.path + "/mnt", "--state", dir.path + "/statefile"], in: dir), code: 73, mentions: dir.path + "/statefile")
        #expect(!isMounted(dir.path + "/mnt"))
    }

    @Test func corruptCatalogIsReportedAndLeftAlone() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        mkdir(dir.path + "/mnt", 0o755)
        mkdir(dir.path + "/s", 0o700)
        let garbage = Data(repeating: 0x5a, count: 10_000)
        #expect(FileManager.default.createFile(atPath: dir.path + "/s/catalog.sqlite", contents: garbage))
        expectOneLine(try mount([dir.path + "/mnt", "--state", dir.path + "/s"], in: dir), code: 65, mentions: dir.path + "/s/catalog.sqlite")
        #expect(FileManager.default.contents(atPath: dir.path + "/s/catalog.sqlite") == garbage)
        #expect(!isMounted(dir.path + "/mnt"))
    }

    @Test func catalogFromANewerVersionIsRefused() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        mkdir(dir.path + "/mnt", 0o755)
        mkdir(dir.path + "/s", 0o700)
        do {
            let db = try Database(path: dir.path + "/s/catalog.sqlite")
            try db.migrate([Migration("drive-999-from-the-future", "CREATE TABLE future(x)")])
        }
        let before = FileManager.default.contents(atPath: dir.path + "/s/catalog.sqlite")
        expectOneLine(try mount([dir.path + "/mnt", "--state", dir.path + "/s"], in: dir), code: 78, mentions: "newer version")
        #expect(FileManager.default.contents(atPath: dir.path + "/s/catalog.sqlite") == before)
    }

    /// A user's mount where /dev/fuse is closed to users (mode 0600, as on some machines
    /// and containers): 69, saying what an administrator can do. Root opens it whatever
    /// its mode, so the mount is tried as nobody, with the device at 0600 meanwhile.
    @Test func aFuseDeviceClosedToUsersSaysSo() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        #expect(chmod(dir.path, 0o777) == 0)
        try FileManager.default.createDirectory(atPath: dir.path + "/mnt", withIntermediateDirectories: false)
        #expect(chown(dir.path + "/mnt", 65534, 65534) == 0)
        var device = stat()
        try #require(stat("/dev/fuse", &device) == 0)
        #expect(chmod("/dev/fuse", 0o600) == 0)
        defer { chmod("/dev/fuse", device.st_mode & 0o7777) }
        let r = try runCommand("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", vdriveBinary, "mount", dir.path + "/mnt",
                                                    "--state", dir.path + "/state"],
                               environment: ["XDG_DATA_HOME": dir.path + "/xdg", "XDG_RUNTIME_DIR": dir.path + "/run", "XDG_CONFIG_HOME": dir.path + "/config"])
        expectOneLine(r, code: 69, mentions: "/dev/fuse is not open to this user (mode 0600)")
        #expect(r.stderr.contains("chmod 0666 /dev/fuse"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/state/catalog.sqlite"), "nothing made before the check")
    }

    @Test func alreadyMountedIsRefused() throws {
        let drive = try MountedDrive()
        defer { drive.stop() }
        let other = TemporaryDirectory(); defer { other.remove() }
        expectOneLine(try mount([drive.mountPoint, "--state", other.path + "/s"], in: other), code: 69, mentions: "already mounted")
    }

    @Test func unknownOptionAndHelp() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        expectOneLine(try mount(["--bogus"], in: dir), code: 64, mentions: "--bogus")
        let help = try runCommand(vdriveBinary, ["mount", "--help"])
        #expect(help.status == 0 && help.stdout.contains("Usage: vdrive mount"))
        let top = try runCommand(vdriveBinary, ["--help"])
        #expect(top.status == 0 && top.stdout.contains("unmount"))
    }
}
