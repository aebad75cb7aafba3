import Foundation
import DeviceWiring
import Server

/// Where `vdrive serve` and each of its verbs (`device`, `backup`, `check`) keep their
/// data, named the same way everywhere, so that adding a device to a scaled server is
/// the same command as for the embedded one: `--data DIR` (the data folder),
/// `--database URL` or `VDRIVE_DATABASE` (PostgreSQL records; default: SQLite in the
/// data folder), `--store` or `VDRIVE_STORE` (blocks: the data folder by default, or
/// `s3://…`). The one place these options are parsed.
struct ServeBackends {
    /// The valued options of the back ends, accepted by every serve verb.
    static let valued: Set<String> = ["--data", "--database", "--store"]

    static let help = """
      --data DIR               data folder (default: $XDG_DATA_HOME/vdrive/server)
      --database URL           records in PostgreSQL: postgresql://USER@HOST:PORT/DB, or
                               postgresql://USER@/DB?host=/run/postgresql for a socket
                               (default: DIR/server.db, SQLite; also read from VDRIVE_DATABASE)
    """

    let dataDirectory: String
    /// nil: SQLite in the data folder.
    let database: DatabaseLocation?
    let store: BlockStoreChoice

    init(_ options: Options) throws {
        let environment = ProcessInfo.processInfo.environment
        dataDirectory = options.value("--data").map(Paths.absolute) ?? Paths.dataHome + "/server"
        if let text = options.value("--database") ?? environment["VDRIVE_DATABASE"], !text.isEmpty {
            do { database = try DatabaseLocation.parse(text) } catch {
                throw CLIError(error.description, code: ExitCode.config)
            }
        } else {
            database = nil
        }
        store = try Self.store(options)
    }

    /// The block store named by `--store`, else `VDRIVE_STORE`, else the data folder.
    static func store(_ options: Options) throws -> BlockStoreChoice {
        let environment = ProcessInfo.processInfo.environment
        guard let text = options.value("--store") ?? environment["VDRIVE_STORE"].flatMap({ $0.isEmpty ? nil : $0 }) else { return .folder }
        do { return try BlockStoreChoice.parse(text, environment: environment) } catch {
            throw CLIError(error.description, code: ExitCode.config)
        }
    }

    /// The server's configuration with these back ends (other settings at their defaults).
    var configuration: ServerConfiguration {
        ServerConfiguration(dataDirectory: dataDirectory, store: store, database: database)
    }
}
