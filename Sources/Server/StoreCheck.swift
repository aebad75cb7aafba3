import Crypto
import ObjectStore
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive serve check`, store part: can this server keep blocks where it is told to.
/// A folder must be writable; a bucket must answer to the credentials, take an object,
/// give it back byte for byte, and delete it (a probe under `check/`, removed after).
public enum StoreCheck {
    public static func run(_ choice: BlockStoreChoice, blobRoot: String) -> RecordsCheck.Report {
        var report = RecordsCheck.Report()
        switch choice {
        case .folder:
            report.lines.append("store: blocks in the folder \(blobRoot)")
            // The nearest folder that exists: the server creates the rest at start.
            var folder = blobRoot
            while !FileIO.exists(folder) && folder != "/" && folder != "." { folder = parentFolder(of: folder) }
            if access(folder, W_OK) != 0 {
                report.problem = (.permission, "cannot write to \(folder) (\(Errno.current)): give the server's user write access, or choose another --data")
            }
        case .s3(let location, let credentials):
            report.lines.append("store: s3://\(location.bucket) at \(location.endpoint) (region \(location.region))")
            let store = S3Store(location: location, credentials: credentials)
            let key = "check/probe-" + Hex.encode(SecureRandom.bytes(8))
            let bytes = Array("vdrive serve check".utf8)
            do {
                let back = try probe(store, key: key, bytes: bytes)
                if back != bytes {
                    report.problem = (.configuration, "the store gave back other bytes than it was given for \(key): check that the endpoint is an S3 store")
                } else {
                    report.lines.append("store: put, read back and deleted a probe object")
                }
            } catch {
                switch error {
                case .unreachable, .http: report.problem = (.unavailable, error.description)
                case .denied: report.problem = (.permission, error.description)
                }
            }
        }
        return report
    }

    /// Creates the bucket if needed, stores `bytes` as `key`, reads them back, deletes them.
    static func probe(_ store: S3Store, key: String, bytes: [UInt8]) throws(ObjectStoreError) -> [UInt8] {
        try store.createBucket()
        let digest = SHA256Hasher.digest(bytes)
        var failure: ObjectStoreError?
        bytes.withUnsafeBytes { raw in
            do { try store.put(key, bytes: raw, sha256: digest) } catch let e as ObjectStoreError { failure = e } catch { failure = .unreachable("\(error)") }
        }
        if let failure { throw failure }
        var back: [UInt8] = []
        _ = try store.read(key) { back.append(contentsOf: $0) }
        try store.delete(key)
        return back
    }

    /// The folder holding `path`.
    static func parentFolder(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
