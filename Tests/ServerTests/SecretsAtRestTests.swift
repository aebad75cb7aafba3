import Client
import Foundation
import Protocol
import Server
import Storage
import Testing

/// The data folder and the database files are the server's user's alone whatever the
/// umask, a too-open folder is fixed at start and reported by `vdrive serve check`, and
/// an internal failure's text never reaches the caller.
@Suite(.tags(.endToEnd), .serialized) struct SecretsAtRestTests {
    static func mode(_ path: String) -> mode_t? { (try? FileIO.status(path)).map { $0.st_mode & 0o7777 } }

    /// Runs `body` with the umask most systems have (022), then puts the test's back.
    static func underUmask022<T>(_ body: () throws -> T) rethrows -> T {
        let saved = umask(0o022)
        defer { umask(saved) }
        return try body()
    }

    @Test func aFreshDataFolderIsPrivateUnderUmask022() throws {
        try Self.underUmask022 {
            let dir = TemporaryDirectory(); defer { dir.remove() }
            let s = try TestServer(dataDirectory: dir.path + "/data"); defer { s.stop() }
            let f = TestFile(in: dir.path, size: 1000, seed: 80)
            try s.store(f, at: "a.txt")
            let db = dir.path + "/data/server.db"
            #expect(Self.mode(dir.path + "/data") == 0o700)
            for path in [db, db + "-wal", db + "-shm"] {
                #expect(Self.mode(path) == 0o600, "\(path): \(Self.mode(path).map { String($0, radix: 8) } ?? "missing")")
            }
        }
    }

    @Test func anOpenFolderIsReportedThenFixedAtStart() throws {
        try Self.underUmask022 {
            let dir = TemporaryDirectory(); defer { dir.remove() }
            let data = dir.path + "/data"
            // What `install -d` makes, with a database from an older server.
            mkdir(data, 0o755)
            chmod(data, 0o755)
            let old = open(data + "/server.db", O_WRONLY | O_CREAT, 0o644); close(old)
            chmod(data + "/server.db", 0o644)

            let check = try run(vdriveBinary(), ["serve", "check", "--data", data])
            #expect(check.0 == 78, "serve check exits EX_CONFIG for an open folder: \(check.1) \(check.2)")
            #expect((check.1 + check.2).contains("\(data) is mode 0755"))
            #expect(Self.mode(data) == 0o755, "check changes nothing")

            let add = try run(vdriveBinary(), ["serve", "device", "add", "phone", "--data", data])
            #expect(add.0 == 0)
            #expect(add.2.contains("\(data) was mode 0755, open to other users: now 0700"), "\(add.2)")
            #expect(add.2.contains("server.db was mode 0644"), "\(add.2)")
            #expect(Self.mode(data) == 0o700)
            #expect(Self.mode(data + "/server.db") == 0o600)

            // Opened again by a running server: the WAL files are private too.
            chmod(data, 0o750)
            let server = try ServerProcess(data: data); defer { server.kill() }
            #expect(Self.mode(data) == 0o700)
            for suffix in ["-wal", "-shm"] {
                #expect(Self.mode(data + "/server.db" + suffix) == 0o600)
            }
            let again = try run(vdriveBinary(), ["serve", "check", "--data", data])
            #expect(again.0 == 0, "\(again.1) \(again.2)")
        }
    }

    /// The records go away under a presigned URL (no token: anyone may hold one). The
    /// reply says what to do and carries a request id, not libpq's words or where the
    /// database is.
    @Test(.enabled(if: PostgresCluster.isInstalled)) func anInternalFailureAnswersARequestIDOnly() throws {
        let cluster = try PostgresCluster(); defer { cluster.stop() }
        let s = try TestServer(records: .postgres, cluster: cluster); defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: 2000, seed: 81)
        let t = try s.ticket(f)
        try cluster.stopServer()
        defer { try? cluster.startServer() }
        let patch = try s.patch(t.url, offset: 0, bytes: f.bytes)
        let bogus = try s.send("GET", "/v1/watermark", headers: ["Authorization: Bearer vdt_nobody"], auth: false)
        for reply in [patch, bogus] {
            #expect(reply.status == 503)
            #expect(reply.error?.message.contains("request id ") == true, "\(reply.text)")
            for secret in ["postgres", cluster.url(database: "x").dropLast(2).description, "/tmp", "socket", "libpq", "SELECT", "devices"] {
                #expect(!reply.text.lowercased().contains(secret.lowercased()), "the reply shows '\(secret)': \(reply.text)")
            }
        }
    }
}
