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
    /// The object store (`--store s3://…`) refused or did not answer.
    case store(String, String)

    public var description: String {
        switch self {
        case .addressInUse(let a): return "\(a) is already in use (another vdrive serve?); stop it or pass --listen 127.0.0.1:OTHERPORT"
        case .cannotListen(let a, let e): return "cannot listen on \(a): \(e); pick another address with --listen"
        case .badAddress(let m): return m
        case .cannotStart(let m): return m
        case .dataFolder(let p, let e): return "the data folder \(p) is not usable (\(e)); pass a writable folder with --data"
        case .database(let p, let m): return "cannot open the server database \(p): \(m); check the file, or pass another --data folder"
        case .newerSchema(let m): return m
        case .store(let l, let m): return "the block store \(l) is not usable: \(m) (--store; Docs/operations.md, \"Scaled server\")"
        }
    }
}
