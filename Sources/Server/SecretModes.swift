import Crypto
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// The data folder holds the presigning key, the token hashes and every path of the
/// workspace (`server.db`, with its `-wal` and `-shm`), and the blocks: only the server's
/// user may read it, whatever the umask or however the folder was made (`install -d`
/// makes 0755). The folder is 0700 and the database files 0600; `secure` puts them so at
/// start and says what it changed, `problems` reports without changing (`vdrive serve check`).
public enum DataFolderModes {
    /// The files that hold secrets: the SQLite database and its companions.
    static func secretFiles(_ dataDirectory: String) -> [String] {
        let db = dataDirectory + "/server.db"
        return [db, db + "-wal", db + "-shm", db + "-journal"]
    }

    /// Restricts the folder and the database files that exist; returns one line per change.
    @discardableResult
    public static func secure(_ dataDirectory: String) -> [String] {
        var changed: [String] = []
        // Group and other bits go; the owner's stay (0755 becomes 0700, 0644 becomes 0600).
        for path in [dataDirectory] + secretFiles(dataDirectory) {
            guard let st = try? FileIO.status(path), st.st_mode & 0o077 != 0 else { continue }
            let old = st.st_mode & 0o7777
            if chmod(path, old & ~0o077) == 0 {
                changed.append("\(path) was mode \(octal(old)), open to other users: now \(octal(old & ~0o077))")
            }
        }
        return changed
    }

    /// What is too open, one line each (nothing changed).
    public static func problems(_ dataDirectory: String) -> [String] {
        ([dataDirectory] + secretFiles(dataDirectory)).compactMap { path in
            guard let st = try? FileIO.status(path), st.st_mode & 0o077 != 0 else { return nil }
            return "\(path) is mode \(octal(st.st_mode & 0o7777)): others may read the server's key, token hashes or paths; chmod go-rwx \(path) (vdrive serve does it at start)"
        }
    }

    static func octal(_ mode: mode_t) -> String { "0" + String(mode, radix: 8) }
}

/// The server's log: stderr, one line per event, prefixed so it can be told apart from
/// other output of `vdrive serve`.
enum ServerLog {
    static func note(_ message: String) {
        // One write(2) per line: lines from several connection threads do not interleave.
        let line = Array("vdrive serve: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    }

    /// Logs an unexpected error with a fresh request id and returns the id, which the
    /// reply carries instead of the error's text (SQL, paths, host names stay here).
    static func failure(_ error: Error) -> String {
        let id = Hex.encode(SecureRandom.bytes(8))
        note("request \(id) failed: \(error)")
        return id
    }
}
