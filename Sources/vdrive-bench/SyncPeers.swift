import Foundation

/// The references of `vdrive-bench sync`'s bulk row, on loopback: an `rsync --daemon`
/// with one writable module, and two Syncthing instances sharing one folder. Both are
/// Debian's packages, installed by the benchmark (as root) when missing.
enum SyncPeers {
    /// Installs the Debian packages whose command is missing (apt-get, as root).
    static func ensureInstalled(_ commands: [String: String]) throws {
        let missing = commands.filter { (try? Bench.sh("command -v \($0.key) >/dev/null")) == nil }.map(\.value)
        guard !missing.isEmpty else { return }
        guard getuid() == 0 else { throw Bench.Failure(description: "\(missing.joined(separator: ", ")) not installed; run as root or apt-get install them") }
        say("sync: installing \(missing.joined(separator: " ")) (apt-get) ...")
        try Bench.sh("apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \(missing.joined(separator: " ")) >/dev/null")
    }

    /// A TCP port nothing listens on at the moment (bound to 127.0.0.1:0 and let go).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Bench.Failure(description: "socket: errno \(errno)") }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard bound else { throw Bench.Failure(description: "bind 127.0.0.1:0: errno \(errno)") }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Waits until something accepts connections on 127.0.0.1:`port`.
    static func waitForPort(_ port: Int, what: String, seconds: Double = 30) throws {
        let deadline = Bench.now() + seconds
        while Bench.now() < deadline {
            if canConnect(port) { return }
            usleep(50_000)
        }
        throw Bench.Failure(description: "\(what) did not listen on 127.0.0.1:\(port) within \(Int(seconds)) s")
    }

    static func canConnect(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    /// Stops a child started with `TimedCommand.spawn` (its whole process group).
    static func stop(_ pid: pid_t) {
        kill(-pid, SIGTERM)
        if !TimedCommand.reap(pid, timeout: 10) {
            kill(-pid, SIGKILL)
            _ = TimedCommand.reap(pid, timeout: 10)
        }
    }
}

/// `rsync --daemon` on a loopback port with a writable module `bench` at `dir/module`.
final class RsyncDaemon {
    let pid: pid_t
    let port: Int
    let module: String

    init(dir: String) throws {
        module = dir + "/module"
        try FileManager.default.createDirectory(atPath: module, withIntermediateDirectories: true)
        port = try SyncPeers.freePort()
        let config = """
            use chroot = no
            pid file = \(dir)/rsyncd.pid
            [bench]
                path = \(module)
                read only = no
                uid = 0
                gid = 0

            """
        try config.write(toFile: dir + "/rsyncd.conf", atomically: true, encoding: .utf8)
        pid = try TimedCommand.spawn(["rsync", "--daemon", "--no-detach", "--config=\(dir)/rsyncd.conf", "--address=127.0.0.1", "--port=\(port)"],
                                     output: dir + "/rsyncd.log")
        do { try SyncPeers.waitForPort(port, what: "rsync --daemon") } catch { stop(); throw error }
    }

    var url: String { "rsync://127.0.0.1:\(port)/bench/" }

    func stop() { SyncPeers.stop(pid) }
}

/// Two Syncthing instances on loopback sharing the folder `bench`: each with its own
/// home made by `syncthing generate`, its config rewritten before the first start
/// (listening on one loopback port, no global or local discovery, no relays, no NAT,
/// no usage or crash reporting, no upgrades, not at low priority, the GUI/REST API on
/// a loopback port with a known key), then the other device and the folder (file
/// watcher, 1 s delay) added through the REST API.
final class SyncthingPair {
    struct Instance {
        let home: String
        let folder: String
        let id: String
        let apiPort: Int
        let listenPort: Int
        let apiKey: String
        var pid: pid_t = 0
    }

    private(set) var a: Instance
    private(set) var b: Instance

    init(dir: String) throws {
        a = try Self.generate(dir: dir + "/a")
        b = try Self.generate(dir: dir + "/b")
        a.pid = try Self.start(a)
        do { b.pid = try Self.start(b) } catch { SyncPeers.stop(a.pid); throw error }
        do {
            for (me, other) in [(a, b), (b, a)] {
                try SyncPeers.waitForPort(me.apiPort, what: "syncthing's REST API (\(me.home))", seconds: 60)
                try Self.rest(me, "POST", "/rest/config/devices", """
                    {"deviceID": "\(other.id)", "name": "\(URL(fileURLWithPath: other.home).lastPathComponent)", \
                    "addresses": ["tcp://127.0.0.1:\(other.listenPort)"], "compression": "metadata"}
                    """)
                try Self.rest(me, "POST", "/rest/config/folders", """
                    {"id": "bench", "label": "bench", "path": "\(me.folder)", "type": "sendreceive", \
                    "devices": [{"deviceID": "\(me.id)"}, {"deviceID": "\(other.id)"}], \
                    "fsWatcherEnabled": true, "fsWatcherDelayS": 1, "rescanIntervalS": 3600}
                    """)
            }
            try waitUntilConnected()
        } catch {
            stop()
            throw error
        }
    }

    /// Both instances connected to each other and the folder idle on both.
    func waitUntilConnected(seconds: Double = 120) throws {
        let deadline = Bench.now() + seconds
        while Bench.now() < deadline {
            let connected = (try? Self.rest(a, "GET", "/rest/system/connections"))?.contains("\"connected\": true") ?? false
            let idle = [a, b].allSatisfy { ((try? Self.rest($0, "GET", "/rest/db/status?folder=bench")) ?? "").contains("\"state\": \"idle\"") }
            if connected && idle { return }
            usleep(200_000)
        }
        throw Bench.Failure(description: "the two Syncthing instances did not connect within \(Int(seconds)) s; their logs: \(a.home)/syncthing.log, \(b.home)/syncthing.log")
    }

    var pids: [pid_t] { [a.pid, b.pid] }

    func stop() {
        for pid in [a.pid, b.pid] where pid > 0 { SyncPeers.stop(pid) }
    }

    static func generate(dir: String) throws -> Instance {
        let home = dir + "/home", folder = dir + "/folder"
        try FileManager.default.createDirectory(atPath: folder + "/.stfolder", withIntermediateDirectories: true)
        try Bench.sh("syncthing generate --home='\(home)' --no-default-folder >/dev/null 2>&1")
        let id = try Bench.sh("syncthing serve --home='\(home)' --device-id 2>/dev/null").trimmingCharacters(in: .whitespacesAndNewlines)
        guard id.count > 50 else { throw Bench.Failure(description: "syncthing did not print its device id for \(home): '\(id)'") }
        let instance = Instance(home: home, folder: folder, id: id, apiPort: try SyncPeers.freePort(), listenPort: try SyncPeers.freePort(),
                                apiKey: "vdrive-bench-" + UUID().uuidString.lowercased())
        var xml = try String(contentsOfFile: home + "/config.xml", encoding: .utf8)
        // (section, element, value): the first such element after the section's start tag.
        let settings: [(String, String, String)] = [
            ("<options>", "listenAddress", "tcp://127.0.0.1:\(instance.listenPort)"),
            ("<options>", "globalAnnounceEnabled", "false"), ("<options>", "localAnnounceEnabled", "false"),
            ("<options>", "relaysEnabled", "false"), ("<options>", "natEnabled", "false"), ("<options>", "urAccepted", "-1"),
            ("<options>", "crashReportingEnabled", "false"), ("<options>", "autoUpgradeIntervalH", "0"),
            ("<options>", "startBrowser", "false"), ("<options>", "setLowPriority", "false"),
            ("<gui ", "address", "127.0.0.1:\(instance.apiPort)"), ("<gui ", "apikey", instance.apiKey),
        ]
        for (section, key, value) in settings {
            guard let start = xml.range(of: section), let open = xml.range(of: "<\(key)>", range: start.upperBound..<xml.endIndex),
                  let close = xml.range(of: "</\(key)>", range: open.upperBound..<xml.endIndex) else {
                throw Bench.Failure(description: "syncthing's generated config has no <\(key)> in \(section)…>: \(home)/config.xml")
            }
            xml.replaceSubrange(open.upperBound..<close.lowerBound, with: value)
        }
        try xml.write(toFile: home + "/config.xml", atomically: true, encoding: .utf8)
        return instance
    }

    static func start(_ i: Instance) throws -> pid_t {
        try TimedCommand.spawn(["env", "STNODEFAULTFOLDER=1", "STNOUPGRADE=1", "syncthing", "serve", "--home=\(i.home)", "--no-browser", "--no-restart",
                                "--no-upgrade", "--logflags=3"], output: i.home + "/syncthing.log")
    }

    /// One REST call; returns the body, fails on an HTTP error. A refused connection is
    /// tried again for up to 30 s: Syncthing may close its API for a moment just after it
    /// starts (a run once lost its Syncthing leg to one refused call after the port had
    /// answered).
    @discardableResult
    static func rest(_ i: Instance, _ method: String, _ path: String, _ body: String? = nil) throws -> String {
        var command = "curl -sS -f --retry 30 --retry-connrefused --retry-delay 1 --retry-max-time 30 -X \(method) -H 'X-API-Key: \(i.apiKey)' 'http://127.0.0.1:\(i.apiPort)\(path)'"
        if let body {
            let file = i.home + "/request.json"
            try body.write(toFile: file, atomically: true, encoding: .utf8)
            command += " -H 'Content-Type: application/json' --data-binary @'\(file)'"
        }
        return try Bench.sh(command)
    }
}
