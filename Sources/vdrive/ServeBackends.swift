import Server
#if canImport(Glibc)
import Glibc
#endif

/// Where `vdrive serve` and each of its verbs (`device`, `backup`, `check`) keep their
/// data, named the same way everywhere: `--data DIR` (the data folder), `--database
/// URL` or `VDRIVE_DATABASE` (PostgreSQL records; default: SQLite in the data folder).
/// The one place these options are parsed; an object store joins here.
struct ServeBackends {
    /// The options every serve verb accepts, for its `Options(valued:)`.
    static let options: Set<String> = ["--data", "--database"]

    static let help = """
      --data DIR               data folder (default: $XDG_DATA_HOME/vdrive/server)
      --database URL           records in PostgreSQL: postgresql://USER@HOST:PORT/DB, or
                               postgresql://USER@/DB?host=/run/postgresql for a socket
                               (default: DIR/server.db, SQLite; also read from VDRIVE_DATABASE)
    """

    let dataDirectory: String
    /// nil: SQLite in the data folder.
    let database: DatabaseLocation?

    init(_ options: Options) throws {
        dataDirectory = options.value("--data").map(Paths.absolute) ?? Paths.dataHome + "/server"
        let text = options.value("--database") ?? getenv("VDRIVE_DATABASE").map { String(cString: $0) }
        if let text, !text.isEmpty {
            do { database = try DatabaseLocation.parse(text) } catch {
                throw CLIError(error.description, code: ExitCode.config)
            }
        } else {
            database = nil
        }
    }

    /// The server's configuration with these back ends (other settings at their defaults).
    var configuration: ServerConfiguration { ServerConfiguration(dataDirectory: dataDirectory, database: database) }
}
