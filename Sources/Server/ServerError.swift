import Postgres
import Storage

/// Why the server could not start. Each message says what to do.
public enum ServerError: Error, CustomStringConvertible, Sendable {
    case addressInUse(String)
    case cannotListen(String, Errno)
    case badAddress(String)
    case cannotStart(String)
    case dataFolder(String, Errno)
    case database(String, String)
    case newerSchema(String)
    /// The PostgreSQL server does not answer (or refuses connections now).
    case databaseUnavailable(String, String)
    /// The PostgreSQL server refused the login, or the role may not create or write the tables.
    case databasePermission(String, String)
    /// The object store (`--store s3://…`) refused or did not answer.
    case store(String, String)

    public var description: String {
        switch self {
        case .addressInUse(let a): return "\(a) is already in use (another vdrive serve?); stop it or pass --listen 127.0.0.1:OTHERPORT"
        case .cannotListen(let a, let e): return "cannot listen on \(a): \(e); pick another address with --listen"
        case .badAddress(let m): return m
        case .cannotStart(let m): return m
        case .dataFolder(let p, let e): return "the data folder \(p) is not usable (\(e)); pass a writable folder with --data"
        case .database(let p, let m): return "cannot open the server database \(p): \(m); check the file or --database (vdrive serve check), or pass another --data folder"
        case .newerSchema(let m): return m
        case .databaseUnavailable(let l, let m): return "the records database \(l) is unreachable: \(m); start PostgreSQL or check --database (vdrive serve check tells more)"
        case .databasePermission(let l, let m): return "the records database \(l) refused: \(m); check the user, password and grants in --database (vdrive serve check tells more)"
        case .store(let l, let m): return "the block store \(l) is not usable: \(m) (--store; Docs/operations.md, \"Scaled server\")"
        }
    }
}

extension ServerError {
    /// The error opening or migrating the records at `location` became, by kind.
    static func records(_ location: DatabaseLocation, _ error: Error) -> ServerError {
        if let e = error as? ServerError { return e }
        if let e = error as? MigrationError { return .newerSchema(e.description) }
        if let e = error as? RecordsUnavailable { return .databaseUnavailable(location.description, e.reason) }
        if let e = error as? PostgresError {
            if e.isPermissionDenied { return .databasePermission(location.description, e.message) }
            if e.isUnavailable { return .databaseUnavailable(location.description, e.message) }
            return .database(location.description, e.description)
        }
        return .database(location.description, "\(error)")
    }
}
