import Foundation

/// A workspace server and the devices that mount its synced workspace, for
/// `vdrive-bench sync`: one `vdrive serve` on a loopback port (embedded records, its
/// access log in `server.log`), each device with its own token (`vdrive serve device
/// add`), state, XDG folders and a foreground `vdrive mount --server --token-file`. The
/// mounts are registered with `BenchMounts`, so an error or ^C unmounts them.
final class SyncWorkspace {
    let vdrive: String
    let dir: String
    let server: RunningServer
    var data: String { dir + "/server" }
    var accessLog: String { dir + "/server.log" }
    private(set) var devices: [SyncDevice] = []

    init(vdrive: String, dir: String) throws {
        self.vdrive = vdrive
        self.dir = dir
        _ = try? Bench.sh("rm -rf '\(dir)'")
        try FileManager.default.createDirectory(atPath: dir + "/server", withIntermediateDirectories: true)
        server = try RunningServer(vdrive: vdrive, data: dir + "/server", extra: [], errors: dir + "/server.log")
    }

    /// A token for `name` (in `DIR/NAME.token`), the way an administrator makes one.
    func addToken(_ name: String) throws -> String {
        let file = dir + "/\(name).token"
        let out = try Bench.sh("'\(vdrive)' serve device add '\(name)' --data '\(data)' 2>/dev/null")
        guard let token = out.split(separator: "\n").first, !token.contains(" ") else {
            throw Bench.Failure(description: "vdrive serve device add \(name) printed no token: \(out)")
        }
        try String(token).write(toFile: file, atomically: true, encoding: .utf8)
        return file
    }

    /// A new device: a token, then a mount of the synced workspace.
    @discardableResult
    func mount(_ name: String) throws -> SyncDevice {
        let device = try SyncDevice(vdrive: vdrive, name: name, dir: dir + "/" + name, server: server.base, tokenFile: try addToken(name))
        devices.append(device)
        return device
    }

    /// Bytes of the server's records (its SQLite files, WAL included).
    var recordsBytes: Int64 { SyncDevice.bytes(under: data, suffix: { $0.contains(".sqlite") || $0.hasSuffix(".db") || $0.contains(".db-") }) }

    /// The access log's size now: lines after this offset are the requests that end later.
    var accessLogOffset: UInt64 { (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? UInt64) ?? 0 }

    /// The access log's lines from `offset` on.
    func accessLines(from offset: UInt64) -> [Substring] {
        var end = offset
        return accessLines(after: &end)
    }

    /// The access log's whole lines from `offset` on (a line being written waits), and
    /// `offset` moved past them: a reader calling again gets only the lines written since.
    func accessLines(after offset: inout UInt64) -> [Substring] {
        guard let h = FileHandle(forReadingAtPath: accessLog) else { return [] }
        defer { try? h.close() }
        try? h.seek(toOffset: offset)
        let data = h.readDataToEndOfFile()
        guard let last = data.lastIndex(of: UInt8(ascii: "\n")) else { return [] }
        let whole = data[data.startIndex...last]
        offset += UInt64(whole.count)
        return String(decoding: whole, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("access ") }
    }

    func stop() {
        for d in devices.reversed() { d.stop() }
        devices = []
        server.stop()
    }
}

/// One device: a foreground `vdrive mount` of the synced workspace, its own state, XDG
/// folders and log (`DIR/mount.log`).
final class SyncDevice {
    let name: String
    let dir: String
    let pid: pid_t
    var mountPoint: String { dir + "/mnt" }
    var log: String { dir + "/mount.log" }

    init(vdrive: String, name: String, dir: String, server: String, tokenFile: String) throws {
        self.name = name
        self.dir = dir
        for sub in ["mnt", "state", "config", "data"] {
            try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true)
        }
        // `env` sets this device's XDG folders and execs the mount: the pid is the daemon's.
        pid = try TimedCommand.spawn(["env", "XDG_CONFIG_HOME=\(dir)/config", "XDG_DATA_HOME=\(dir)/data", vdrive, "mount", dir + "/mnt",
                                      "--state", dir + "/state", "-f", "--server", server, "--token-file", tokenFile], output: dir + "/mount.log")
        BenchMounts.shared.add(.init(path: dir + "/mnt", pid: pid))
        do { try Bench.waitForMount(dir + "/mnt") } catch {
            stop()
            throw Bench.Failure(description: "\(name)'s mount did not come up; its log: \(dir)/mount.log")
        }
    }

    func path(_ relative: String) -> String { mountPoint + "/" + relative }

    func cpuSeconds() -> Double { Bench.cpuSeconds(pid: pid) }

    /// Bytes of the device's catalog (catalog.sqlite, WAL included).
    var catalogBytes: Int64 { Self.bytes(under: dir + "/state", suffix: { $0.hasPrefix("catalog.sqlite") }) }

    func stop() { BenchMounts.shared.unmount(path: mountPoint) }

    /// The last lines of the mount's log, for an error message.
    func logTail(_ lines: Int = 15) -> String {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? "(no log)"
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// Total size of the files directly in `folder` whose name passes `suffix`.
    static func bytes(under folder: String, suffix: (String) -> Bool) -> Int64 {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter(suffix).reduce(Int64(0)) { sum, name in
            sum + ((try? FileManager.default.attributesOfItem(atPath: folder + "/" + name)[.size] as? Int64) ?? 0)
        }
    }
}
