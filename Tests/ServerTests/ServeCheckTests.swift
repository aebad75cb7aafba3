import Foundation
import Storage
import Testing

/// `vdrive serve check` and `--database` / `VDRIVE_DATABASE` on the serve verbs, through
/// the real binary: what it reports and its sysexits code for each kind of problem.
@Suite(.tags(.endToEnd)) struct ServeCheckTests {
    @Test(.enabled(if: PostgresCluster.isInstalled)) func postgresFreshThenMigratedAndEachProblem() throws {
        let cluster = try #require(PostgresCluster.shared)
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let url = try cluster.newDatabase()
        let fresh = try runCommand(vdriveBinary(), ["serve", "check", "--database", url])
        #expect(fresh.status == 0, "\(fresh.stderr)")
        #expect(fresh.stdout.contains("version: PostgreSQL 15"))
        #expect(fresh.stdout.contains("schema: 0 of 7 migrations applied"))
        #expect(fresh.stdout.contains("permissions: can create tables and write them"))
        // The same option from the environment, on another verb: the device is in PostgreSQL, not in the data folder.
        let added = try runCommand(vdriveBinary(), ["serve", "device", "add", "phone", "--data", dir.path + "/data"], environment: ["VDRIVE_DATABASE": url])
        #expect(added.status == 0, "\(added.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/data/server.db"))
        let listed = try runCommand(vdriveBinary(), ["serve", "device", "list", "--data", dir.path + "/data", "--database", url])
        #expect(listed.stdout.hasPrefix("phone\tactive"))
        let migrated = try runCommand(vdriveBinary(), ["serve", "check", "--database", url])
        #expect(migrated.stdout.contains("schema: 7 of 7 migrations applied (latest server-007-tree)"))

        let nobody = try runCommand(vdriveBinary(), ["serve", "check", "--database", "postgresql://postgres@/x?host=" + dir.path])
        #expect(nobody.status == 69)
        #expect(nobody.stderr.contains("no PostgreSQL server answers"))
        let badRole = try runCommand(vdriveBinary(), ["serve", "check", "--database", url.replacingOccurrences(of: "postgres@", with: "nosuchrole@")])
        #expect(badRole.status == 77)
        #expect(badRole.stderr.contains("nosuchrole"))
        let badURL = try runCommand(vdriveBinary(), ["serve", "check"], environment: ["VDRIVE_DATABASE": "mysql://db/x"])
        #expect(badURL.status == 78)
        #expect(badURL.stderr.contains("must be a PostgreSQL URL"))
        let badPort = try runCommand(vdriveBinary(), ["serve", "check", "--database", "postgresql://postgres@localhost:54x2/db"])
        #expect(badPort.status == 78)
        #expect(badPort.stderr.contains("invalid port"))
        let serveDown = try runCommand(vdriveBinary(), ["serve", "--data", dir.path + "/data", "--listen", "127.0.0.1:0", "--database", "postgresql://postgres@/x?host=" + dir.path])
        #expect(serveDown.status == 69)
        #expect(serveDown.stderr.contains("unreachable"))

        // A schema from a newer vdrive is refused by check and by the server, and left as it was.
        let name = PostgresCluster.databaseName(of: url)
        try cluster.psql(name, "INSERT INTO schema_migrations VALUES ('server-999-future', 0)")
        let newer = try runCommand(vdriveBinary(), ["serve", "check", "--database", url])
        #expect(newer.status == 78)
        #expect(newer.stderr.contains("server-999-future"))
        let refused = try runCommand(vdriveBinary(), ["serve", "device", "list", "--data", dir.path + "/data", "--database", url])
        #expect(refused.status == 78)
    }

    @Test func sqliteInTheDataFolder() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let before = try runCommand(vdriveBinary(), ["serve", "check", "--data", data])
        #expect(before.status == 0)
        #expect(before.stdout.contains("schema: no database yet"))
        #expect(try runCommand(vdriveBinary(), ["serve", "device", "add", "phone", "--data", data]).status == 0)
        let after = try runCommand(vdriveBinary(), ["serve", "check", "--data", data])
        #expect(after.status == 0)
        #expect(after.stdout.contains("records: SQLite \(data)/server.db"))
        #expect(after.stdout.contains("schema: 7 of 7 migrations applied"))
        let db = try Database(path: data + "/server.db")
        try db.run("INSERT INTO schema_migrations(name, applied_at) VALUES ('server-999-future', 0)")
        let newer = try runCommand(vdriveBinary(), ["serve", "check", "--data", data])
        #expect(newer.status == 78)
    }
}

/// `vdrive serve check --store`: the object store half, against a real SeaweedFS.
@Suite(.tags(.endToEnd), .serialized) struct StoreCheckTests {
    @Test func aBucketThatAnswersAWrongKeyAndNoStore() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let weed = try SeaweedFS(folder: dir.path + "/seaweed")
        defer { weed.stop() }
        let keys = ["AWS_ACCESS_KEY_ID": weed.accessKey, "AWS_SECRET_ACCESS_KEY": weed.secretKey]
        let good = try runCommand(vdriveBinary(), ["serve", "check", "--data", dir.path + "/data", "--store", weed.storeURL], environment: keys)
        #expect(good.status == 0, "\(good.stderr)")
        #expect(good.stdout.contains("store: s3://\(weed.bucket) at \(weed.endpoint)"))
        #expect(good.stdout.contains("store: put, read back and deleted a probe object"))

        let wrongKey = try runCommand(vdriveBinary(), ["serve", "check", "--data", dir.path + "/data", "--store", weed.storeURL],
                                      environment: ["AWS_ACCESS_KEY_ID": weed.accessKey, "AWS_SECRET_ACCESS_KEY": "not-the-secret"])
        #expect(wrongKey.status == 77, "\(wrongKey.stdout) \(wrongKey.stderr)")
        #expect(wrongKey.stderr.contains("refused"))

        weed.stop()
        let down = try runCommand(vdriveBinary(), ["serve", "check", "--data", dir.path + "/data", "--store", weed.storeURL], environment: keys)
        #expect(down.status == 69, "\(down.stdout) \(down.stderr)")
        #expect(down.stderr.contains("unreachable"))
    }

    @Test func aFolderThatCannotBeWritten() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let ok = try runCommand(vdriveBinary(), ["serve", "check", "--data", dir.path + "/data"])
        #expect(ok.stdout.contains("store: blocks in the folder \(dir.path)/data/blobs"))
    }
}
