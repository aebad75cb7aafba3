import Foundation

/// A private PostgreSQL 15 cluster for the tests of this process: `initdb` and `pg_ctl`
/// from Debian's `postgresql` package in a temporary folder, listening on a unix socket
/// in that folder only (no TCP port to collide with anyone's). PostgreSQL refuses to
/// run as root, so as root the cluster runs as the `postgres` system user the package
/// creates (`runuser`), with the folder handed to it.
///
/// One cluster per test process, started on first use (`shared`), and stopped on every
/// path: at exit (atexit), and by a watchdog process that stops it when this process
/// dies without exiting (a crash, a SIGKILL). Each test gets a fresh database.
public final class PostgresCluster: @unchecked Sendable { // immutable after init
    public let folder: String
    public let dataFolder: String
    let bin: String
    let asPostgres: Bool

    /// The cluster of this test process, started on first use; nil (with the reason
    /// printed once) when PostgreSQL is not installed or does not start.
    public static let shared: PostgresCluster? = {
        do {
            let cluster = try PostgresCluster()
            atexit { PostgresCluster.shared?.stop() }
            return cluster
        } catch {
            FileHandle.standardError.write(Data("PostgresCluster: \(error)\n".utf8))
            return nil
        }
    }()

    public static var isInstalled: Bool { Self.binFolder() != nil }

    static func binFolder() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted()
        return versions.last.map { "\(root)/\($0)/bin" }.flatMap { FileManager.default.isExecutableFile(atPath: $0 + "/pg_ctl") ? $0 : nil }
    }

    /// A cluster of its own (tests that restart or stop it, so that other tests running
    /// at the same time keep theirs); `stop()` it on every path (the watchdog covers a crash).
    public init() throws {
        guard let bin = Self.binFolder() else { throw ClusterError("PostgreSQL is not installed (apt-get install postgresql; Tests/run does)") }
        self.bin = bin
        asPostgres = getuid() == 0
        folder = TemporaryDirectory("vdrive-pg").path
        dataFolder = folder + "/data"
        if asPostgres {
            // initdb needs the folder to be the cluster user's, and every folder above it searchable.
            try runCommand("/bin/chown", ["postgres:postgres", folder]).check("chown")
            chmod(folder, 0o700)
        }
        try run("initdb", ["-D", dataFolder, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"]).check("initdb")
        // No TCP, the socket in our folder; fsync off: a test cluster needs no durability.
        // In the configuration file, so that restart and start keep them.
        let settings = "\nlisten_addresses = ''\nunix_socket_directories = '\(folder)'\nfsync = off\nmax_connections = 200\n"
        let conf = try FileHandle(forWritingTo: URL(fileURLWithPath: dataFolder + "/postgresql.conf"))
        try conf.seekToEnd()
        try conf.write(contentsOf: Data(settings.utf8))
        try conf.close()
        try startServer()
        Self.startWatchdog(cluster: self)
    }

    /// A connection URL for database `name` over the socket.
    public func url(database: String) -> String { "postgresql://postgres@/\(database)?host=\(folder)" }

    /// The database a URL of `url(database:)` names.
    public static func databaseName(of url: String) -> String {
        guard let start = url.range(of: "@/") else { return "" }
        return String(url[start.upperBound...].prefix { $0 != "?" })
    }

    /// A fresh, empty database; its URL.
    public func newDatabase() throws -> String {
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try psql("postgres", "CREATE DATABASE \(name)")
        return url(database: name)
    }

    /// A fresh database of the shared cluster; throws when the cluster did not start.
    public static func freshDatabase() throws -> String {
        guard let shared else { throw ClusterError("the test PostgreSQL cluster did not start (see stderr); Tests/run installs postgresql") }
        return try shared.newDatabase()
    }

    /// Runs SQL with psql as the superuser; its standard output.
    @discardableResult
    public func psql(_ database: String, _ sql: String) throws -> String {
        let result = try runCommand(bin + "/psql", ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", folder, "-U", "postgres", "-d", database, "-c", sql])
        try result.check("psql \(sql)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `pg_ctl restart`: every connection is cut, the server is back when it returns.
    public func restart() throws {
        try run("pg_ctl", ["-D", dataFolder, "-w", "-t", "60", "-m", "fast", "restart"]).check("pg_ctl restart")
    }

    public func stopServer() throws { try run("pg_ctl", ["-D", dataFolder, "-w", "-m", "fast", "stop"]).check("pg_ctl stop") }
    public func startServer() throws { try run("pg_ctl", ["-D", dataFolder, "-l", folder + "/log", "-w", "-t", "60", "start"]).check("pg_ctl start") }

    /// Stops the server and removes the folder.
    public func stop() {
        _ = try? run("pg_ctl", ["-D", dataFolder, "-w", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: folder)
    }

    /// Runs a PostgreSQL program, with posix_spawn and waitpid rather than Foundation's
    /// Process: `pg_ctl start` leaves the server running with the descriptors it
    /// inherited, and Process (pipes, its SIGCHLD watcher) waited for ever on it. The
    /// output goes to a file in the cluster's folder.
    private func run(_ tool: String, _ arguments: [String]) throws -> CommandResult {
        let path = asPostgres ? "/usr/sbin/runuser" : bin + "/" + tool
        let argv = [path] + (asPostgres ? ["-u", "postgres", "--", bin + "/" + tool] : []) + arguments
        let outputPath = folder + "/\(tool).out"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, nil, cArguments, environ)
        guard rc == 0 else { throw ClusterError("cannot start \(path): error \(rc)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return CommandResult(status: exited, stdout: text, stderr: "")
    }

    /// A shell that waits for this process to end, then stops the cluster if it still runs.
    private static func startWatchdog(cluster: PostgresCluster) {
        let stop = (cluster.asPostgres ? "/usr/sbin/runuser -u postgres -- " : "") + "\(cluster.bin)/pg_ctl -D \(cluster.dataFolder) -m immediate stop"
        let script = "while kill -0 \(getpid()) 2>/dev/null; do sleep 1; done; if [ -d \(cluster.dataFolder) ]; then \(stop) >/dev/null 2>&1; rm -rf \(cluster.folder); fi"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
        p.arguments = ["/bin/sh", "-c", script]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try? p.run()
    }
}

extension CommandResult {
    func check(_ what: String) throws {
        if status != 0 { throw ClusterError("\(what) failed (\(status)): \(stderr)\(stdout)") }
    }
}

struct ClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
