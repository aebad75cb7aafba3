import Crypto
import ObjectStore
import Protocol
import Storage
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How a server runs. `dataDirectory` holds `server.db` and `blobs/` (the block store:
/// the folder kept its name from before content was cut into blocks).
public struct ServerConfiguration: Sendable {
    public var dataDirectory: String
    public var host: String
    /// 0 picks a free port (tests).
    public var port: UInt16
    /// Lifetime of a presigned upload URL, seconds (default 7 days).
    public var uploadExpiry: Int64
    /// Base of the presigned URLs handed out; nil means `http://<the request's Host>` (`https://` over TLS).
    public var publicURL: String?
    /// fdatasync the staging file at the end of every PATCH before its offset is recorded.
    /// Off by default: see Docs/protocol.md, "Kill safety".
    public var syncEveryPatch: Bool
    /// Where blocks are kept: `blobs/` in the data folder (default) or an S3 bucket.
    public var store: BlockStoreChoice
    /// The records: nil for the SQLite file `server.db` in the data folder.
    public var database: DatabaseLocation?
    /// What one client can make the server hold (ServerLimits.swift).
    public var limits = ServerLimits()
    /// Connections per address and in all, and the deadlines of slow ones (ConnectionGuard.swift).
    public var connectionLimits = ConnectionLimits()
    /// HTTPS with this certificate and key; nil serves plain HTTP.
    public var tls: TLSConfiguration? = nil
    /// The scheme clients reach this server by.
    var scheme: String { tls == nil ? "http" : "https" }
    /// Space (SpaceCollector.swift, Quota.swift): seconds between garbage collections
    /// (0: none), their grace period in seconds, and the workspace's quota in bytes.
    public var gcInterval: Int64 = 6 * 3600
    public var gcGrace: Int64 = 24 * 3600
    public var quota: Int64?
    /// One line per request on stderr (AccessLog.swift).
    public var accessLog = AccessLogMode.stderr
    /// The bearer token `GET /metrics` asks for; nil: served to loopback clients only.
    public var metricsToken: String?
    /// Days a node stays in the workspace tree's trash before the periodic collection
    /// purges it (TreeTrash.swift); 0 keeps the trash forever.
    public var trashDays: Int64 = 30

    public init(dataDirectory: String, host: String = "127.0.0.1", port: UInt16 = 8420,
                uploadExpiry: Int64 = 7 * 86400, publicURL: String? = nil, syncEveryPatch: Bool = false,
                store: BlockStoreChoice = .folder, database: DatabaseLocation? = nil) {
        self.dataDirectory = dataDirectory; self.host = host; self.port = port
        self.uploadExpiry = uploadExpiry; self.publicURL = publicURL; self.syncEveryPatch = syncEveryPatch
        self.store = store
        self.database = database
    }

    /// When an upload URL made at `now` expires. Saturated at `Int64.max`: the lifetime
    /// is any positive number an operator typed, and an overflowing sum would trap on the
    /// first upload a device asks for.
    func uploadExpires(after now: Int64) -> Int64 {
        let (sum, overflow) = now.addingReportingOverflow(uploadExpiry)
        return overflow ? .max : sum
    }

    var databasePath: String { dataDirectory + "/server.db" }
    /// Where the records are.
    public var records: DatabaseLocation { database ?? .sqlite(path: databasePath) }
    var blobRoot: String { dataDirectory + "/blobs" }
}

/// The workspace server: opens (and repairs) the data folder, then serves HTTP until `stop()`.
public final class WorkspaceServer: Sendable {
    public let configuration: ServerConfiguration
    private let daemon: HTTPDaemon
    let router: Router
    private let collectorJob: CollectorJob
    /// The other server processes' commits, with the records in PostgreSQL.
    private let listener: ChangeListener?

    /// Opens the data folder, recovers after an unclean stop, binds and starts serving.
    public init(_ configuration: ServerConfiguration) throws(ServerError) {
        self.configuration = configuration
        if let problem = configuration.limits.problem { throw .cannotStart(problem) }
        let context = try ServerContext.open(configuration)
        router = Router(context: context)
        var listener: ChangeListener?
        if case .postgres(let url) = configuration.records {
            listener = ChangeListener(connectionString: url, notifier: context.notifier)
        }
        self.listener = listener
        var serving = false
        defer {
            if !serving {
                listener?.stop()
                context.notifier.stop()
            }
        }
        let metrics = context.metrics
        let observer: any RequestObserver = configuration.accessLog == .off ? metrics : RequestObservers(all: [AccessLog(), metrics])
        daemon = try HTTPDaemon(host: configuration.host, port: configuration.port, handler: router, limits: configuration.connectionLimits,
                                tls: configuration.tls, observer: observer)
        serving = true
        collectorJob = CollectorJob(collector: context.collector, interval: configuration.gcInterval, grace: configuration.gcGrace,
                                    trashDays: configuration.trashDays, metrics: metrics)
        Self.registerGauges(metrics, daemon: daemon, context: context)
        collectorJob.start()
    }

    private static func registerGauges(_ metrics: ServerMetrics, daemon: HTTPDaemon, context: ServerContext) {
        let gauges: [ServerMetrics.Gauge] = [
            .init(name: "vdrive_http_open_connections", help: "Connections open now.") { [weak daemon] in Int64(daemon?.guardian.openCount ?? 0) },
            .init(name: "vdrive_http_held_requests", help: "Requests held for an event (long polls) now.") { [weak daemon] in Int64(daemon?.heldCount ?? 0) },
            .init(name: "vdrive_uploads_in_flight", help: "tus uploads being written by a PATCH now.") { [weak context] in Int64(context?.uploads.writing ?? 0) },
            .init(name: "vdrive_upload_hashers_open", help: "Trailing hashers kept between PATCHes (at most the open-hashers limit).") { [weak context] in Int64(context?.uploads.openHashers ?? 0) },
            .init(name: "vdrive_buffered_body_bytes", help: "Request body bytes held in memory now (at most the body budget).") { [weak context] in Int64(context?.memoryBudget.held ?? 0) },
        ]
        gauges.forEach(metrics.register)
    }

    public var port: UInt16 { daemon.port }
    /// Connections closed for missing a deadline (a header, a body's minimum rate) since the start.
    public var connectionsCut: Int { daemon.guardian.cut.load(ordering: .relaxed) }
    public var baseURL: String { "\(configuration.scheme)://\(configuration.host):\(port)" }

    /// Requests held right now (long polls waiting for a change).
    public var heldRequests: Int { daemon.heldCount }

    /// Times the server connected to listen for other processes' changes (PostgreSQL
    /// records; 0 otherwise): more than one after the database came back.
    public var listenerConnections: Int { listener?.connections.load(ordering: .relaxed) ?? 0 }

    /// Stops accepting, answers held requests with 503, ends open connections (their
    /// partial PATCHes are handled as disconnects) and waits for the connection threads.
    /// Idempotent.
    public func stop() {
        collectorJob.stop()
        listener?.stop()
        daemon.stop()
        router.context.notifier.stop()
        router.context.uploads.cancelAll()
    }
}

/// Everything the handlers share. Created once per server.
final class ServerContext: Sendable {
    let configuration: ServerConfiguration
    let metadata: Metadata
    /// Where blocks are kept: the folder `blobs/` or an object store (BlockStore.swift).
    let blocks: any BlockStore
    /// `blobs/` in the data folder, whichever store keeps the blocks: tus uploads are
    /// staged in its `staging/`, and the blobs an older data folder kept whole are
    /// removed from it (BlockMigration.swift).
    let dataBlobs: BlobStore
    let presigner: Presigner
    /// The workspace's identity (Metadata.workspaceID), read once at start.
    let workspaceID: String
    let uploads: UploadTable
    /// Wakes the requests waiting at the end of a feed (the long poll).
    let notifier = ChangeNotifier()
    /// Bytes of request bodies held in memory, over all connections.
    let memoryBudget: MemoryBudget
    private let lastSweep = Mutex(ServerContext.now())
    /// The workspace's bytes in blocks, as last counted (Quota.swift).
    let usedBytes = Mutex<(bytes: Int64, at: Int64)?>(nil)
    /// Bytes of blocks being recorded right now, held against the quota (Quota.swift).
    let quotaReserved = Mutex<Int64>(0)
    let metrics: ServerMetrics
    /// Told after every committed tree change (TreeChangeListener.swift).
    var treeListener: any TreeChangeListener { notifier }
    var collector: SpaceCollector {
        SpaceCollector(metadata: metadata, blocks: blocks, dataDirectory: configuration.dataDirectory)
    }

    private init(configuration: ServerConfiguration, metadata: Metadata, blocks: any BlockStore, dataBlobs: BlobStore, presigner: Presigner,
                 workspaceID: String) {
        self.configuration = configuration; self.metadata = metadata; self.blocks = blocks; self.dataBlobs = dataBlobs; self.presigner = presigner
        self.workspaceID = workspaceID
        self.uploads = UploadTable(openLimit: configuration.limits.openUploads)
        self.memoryBudget = MemoryBudget(total: configuration.limits.bufferedBytes)
        self.metrics = ServerMetrics(token: configuration.metricsToken)
    }

    static func open(_ configuration: ServerConfiguration) throws(ServerError) -> ServerContext {
        let dir = configuration.dataDirectory
        do {
            try FileIO.makeDirectories(dir)
        } catch let e as Errno { throw .dataFolder(dir, e) } catch { throw .dataFolder(dir, .ioError) }
        if access(dir, W_OK) != 0 { throw .dataFolder(dir, Errno.current) }
        DataFolderModes.secure(dir).forEach { ServerLog.note($0) }
        let blobs: BlobStore
        do { blobs = try BlobStore(root: configuration.blobRoot) }
        catch let e as Errno { throw .dataFolder(configuration.blobRoot, e) } catch { throw .dataFolder(configuration.blobRoot, .ioError) }
        let metadata = try Metadata(location: configuration.records, blobRoot: configuration.blobRoot)
        let key: [UInt8], workspaceID: String
        do {
            key = try metadata.presignKey()
            workspaceID = try metadata.workspaceID()
        } catch { throw .records(configuration.records, error) }
        let context = ServerContext(configuration: configuration, metadata: metadata, blocks: try configuration.store.open(folder: blobs),
                                    dataBlobs: blobs, presigner: Presigner(key: key), workspaceID: workspaceID)
        var opened = false
        defer { if !opened { context.notifier.stop() } }
        do { try context.blocks.takeForServing() } catch { throw .store(configuration.store.summary, "\(error)") }
        do { try context.recover() } catch { throw .database(configuration.records.description, "recovery failed: \(error)") }
        do { try metadata.recordQuota(configuration.quota) } catch { throw .records(configuration.records, error) }
        opened = true
        return context
    }

    static func now() -> Int64 { Int64(time(nil)) }

    func stagingPath(uploadID: String) -> String { dataBlobs.stagingRoot + "/tus-" + uploadID }

    /// After an unclean stop: an upload's recorded offset never exceeds its staging
    /// file's size; a block renamed into place whose row was not yet written is checked
    /// and recorded; expired uploads and stray staging files are removed; files of
    /// blobs that the block migration replaced are removed.
    func recover() throws {
        try BlockMigration.removeObsolete(metadata, store: dataBlobs)
        let pending = try metadata.allUploads()
        let now = Self.now()
        var keep: Set<String> = []
        for upload in pending {
            guard let digest = SHA256Digest(hex: upload.hash) else { continue }
            let staging = stagingPath(uploadID: upload.id)
            if upload.expiresAt < now { continue }  // removed by sweepExpired below
            // Killed between the rename into the store and the row: checked, then recorded.
            if try metadata.blockSize(upload.hash) == nil, let size = blocks.unrecorded(digest) {
                do { try recordBlock(digest, size: size, uploadID: upload.id) } catch is BlockBeingRemoved {}
            }
            if upload.completed { continue }
            keep.insert("tus-" + upload.id)
            let size = (try? FileIO.status(staging)).map { Int64($0.st_size) } ?? -1
            if size < 0 {
                let fd = try FileIO.open(staging, O_WRONLY | O_CREAT, 0o600)
                FileIO.close(fd)
            }
            let clamped = max(0, min(upload.received, size))
            if clamped != upload.received {
                try metadata.setReceived(id: upload.id, from: upload.received, to: clamped)
            }
        }
        for name in (try? FileIO.listDirectory(dataBlobs.stagingRoot)) ?? [] where !keep.contains(name) {
            _ = unlink(dataBlobs.stagingRoot + "/" + name)
        }
        try sweepExpired(now: now)
    }

    /// Removes uploads whose URL expired (their rows and staging files), skipping any
    /// being written right now. Runs at start and then at most hourly, from create-upload.
    func sweepExpired(now: Int64) throws {
        let expired = try metadata.expiredUploadIDs(now: now)
        for id in expired {
            guard let claimed = uploads.claim(id) else { continue }
            claimed?.cancel()
            _ = unlink(stagingPath(uploadID: id))
            try metadata.deleteExpiredUpload(id: id, now: now)
            uploads.remove(id)
        }
    }

    /// Calls `sweepExpired` when the last sweep is an hour old.
    func sweepIfDue() {
        let now = Self.now()
        let due = lastSweep.withLock { last -> Bool in
            if now - last < 3600 { return false }
            last = now
            return true
        }
        if due { try? sweepExpired(now: now) }
    }

    /// Records a block that is in the store (and marks its upload complete) in one transaction.
    func recordBlock(_ digest: SHA256Digest, size: Int64, uploadID: String?) throws {
        try metadata.recordBlock(digest.hex, size: size, uploadID: uploadID, now: Self.now()) { try blocks.holds(digest) }
        usedBytes.withLock { $0 = nil }  // counted again for the next quota check
    }


    /// The block's length when the workspace has it. A block file without its row (a
    /// kill between rename and row) is checked and recorded here.
    func presentBlockSize(_ digest: SHA256Digest) throws -> Int64? {
        if let size = try metadata.blockSize(digest.hex) { return size }
        guard let size = blocks.unrecorded(digest) else { return nil }
        do { try recordBlock(digest, size: size, uploadID: nil) } catch is BlockBeingRemoved { return nil }  // the collection's leftover
        return size
    }
}
