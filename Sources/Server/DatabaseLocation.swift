import Postgres

/// Where a server's records are: the SQLite file in its data folder (the default), or
/// a PostgreSQL database named by a libpq connection URI
/// (`postgresql://user@host:5432/db`, `postgresql://user@/db?host=/run/postgresql`).
public enum DatabaseLocation: Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(connectionString: String)

    public enum ParseError: Error, CustomStringConvertible, Equatable {
        case notPostgres(String)
        case invalid(String, reason: String)
        public var description: String {
            switch self {
            case .notPostgres(let text):
                return "--database must be a PostgreSQL URL such as postgresql://vdrive@localhost:5432/vdrive (or ?host=/run/postgresql for a socket), got '\(DatabaseLocation.redacted(text))'; leave it out for the SQLite file in the data folder"
            case .invalid(let text, let reason):
                return "--database '\(DatabaseLocation.redacted(text))' is not a valid PostgreSQL URL: \(reason)"
            }
        }
    }

    /// Parses the value of `--database` / `VDRIVE_DATABASE`. Only PostgreSQL URLs are
    /// accepted there: the SQLite file is named by `--data`.
    public static func parse(_ text: String) throws(ParseError) -> DatabaseLocation {
        guard text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") else { throw .notPostgres(text) }
        if let reason = PostgresProbe.parseError(text) { throw .invalid(text, reason: reason) }
        return .postgres(connectionString: text)
    }

    public var description: String {
        switch self {
        case .sqlite(let path): return path
        case .postgres(let url): return Self.redacted(url)
        }
    }

    /// The URL with its password (user:PASSWORD@ or password=…) replaced by `***`, for messages and logs.
    public static func redacted(_ url: String) -> String {
        var text = url
        if let scheme = text.range(of: "://"), let at = text[scheme.upperBound...].firstIndex(of: "@"),
           let colon = text[scheme.upperBound..<at].firstIndex(of: ":") {
            text.replaceSubrange(text.index(after: colon)..<at, with: "***")
        }
        if let p = text.range(of: "password=") {
            let end = text[p.upperBound...].firstIndex(where: { $0 == "&" || $0 == " " }) ?? text.endIndex
            text.replaceSubrange(p.upperBound..<end, with: "***")
        }
        return text
    }
}
