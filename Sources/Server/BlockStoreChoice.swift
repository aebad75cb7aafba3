import ObjectStore
import Storage

/// Where the server keeps blocks: its local folder (`blobs/`, the embedded default) or
/// an S3 bucket (a scaled server: several processes share it).
public enum BlockStoreChoice: Sendable, Equatable {
    case folder
    case s3(S3Location, S3Credentials)
}

extension BlockStoreChoice {
    /// Parses `--store` / `VDRIVE_STORE`: `s3://BUCKET?endpoint=…&region=…[&credentials=FILE]`
    /// (credentials from the file, else `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` in
    /// `environment`). The embedded folder store is the default and needs no value.
    public static func parse(_ text: String, environment: [String: String]) throws(S3Location.ParseError) -> BlockStoreChoice {
        let location = try S3Location.parse(text)
        return .s3(location, try location.credentials(environment: environment))
    }

    /// For messages and logs (never the credentials).
    public var summary: String {
        switch self {
        case .folder: return "blobs/ in the data folder"
        case .s3(let location, _): return "s3://\(location.bucket) at \(location.endpoint)"
        }
    }

    /// The store it names: the folder store on `folder` (the data folder's `blobs/`), or
    /// an S3 bucket, checked (and created when missing) before serving.
    func open(folder: BlobStore) throws(ServerError) -> any BlockStore {
        guard case .s3(let location, let credentials) = self else {
            do { return try FolderBlocks(folder) } catch {
                throw .store(folder.root + "/packs", "its pack file or index cannot be opened: \(error); check the folder's permissions and free space")
            }
        }
        let objects = ObjectBlocks(store: S3Store(location: location, credentials: credentials))
        do { try objects.prepare() } catch { throw .store("s3://\(location.bucket) at \(location.endpoint)", error.description) }
        return objects
    }
}
