import Client
import Crypto
import Drive
import Protocol

/// The drive's `RemoteRecords` over the workspace API: the change feed with the
/// administrator's deletions (`GET /v1/changes`), and content block lists
/// (`GET /v1/contents/<hash>/blocks`). The one place the feed's wire records become
/// the drive's `RemoteVersion`s.
public final class ClientRemoteRecords: RemoteRecords, Sendable {
    private let client: WorkspaceClient

    init(client: WorkspaceClient) { self.client = client }

    /// A client for the feed: a connect timeout short enough that a drive whose server
    /// is down notices within a few seconds, not the backup's patient ten.
    public static func forRemote(_ remote: RemoteConfig) throws -> ClientRemoteRecords {
        ClientRemoteRecords(client: try remote.client(timeouts: Timeouts(connect: 3, lowSpeedBytes: 1024, lowSpeedSeconds: 10)))
    }

    public func changes(since: Int64, limit: Int) throws(RemoteFailure) -> RemoteChangePage {
        try changes(since: since, limit: limit, wait: 0, cancelled: { false })
    }

    public func changes(since: Int64, limit: Int, wait: Int, cancelled: @escaping @Sendable () -> Bool) throws(RemoteFailure) -> RemoteChangePage {
        let reply: ChangesResponse
        do { reply = try client.changesPage(since: since, limit: limit, wait: wait, cancelled: cancelled) } catch { throw Self.failure(error, "the change feed") }
        var changes: [RemoteChange] = []
        for r in reply.changes {
            guard let sequence = r.sequence, let device = r.device, let content = SHA256Digest(hex: r.hash) else {
                throw .unavailable("the server sent a change without sequence, device or a valid hash (path '\(r.path)')")
            }
            changes.append(.recorded(RemoteVersion(sequence: sequence, device: device, path: r.path, content: content, size: r.size,
                                                   captureDate: r.captureDate, mtime: r.mtime, recordedAt: r.recordedAt)))
        }
        for d in reply.deletions ?? [] { changes.append(.deleted(sequence: d.sequence, version: d.version)) }
        changes.sort { $0.sequence < $1.sequence }
        return RemoteChangePage(changes: changes, nextSequence: reply.nextSequence, latestSequence: reply.latestSequence,
                                workspace: reply.workspace)
    }

    public func blockList(of content: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest] {
        do { return try client.contentBlocks(content).blocks } catch { throw Self.failure(error, "the block list of \(content.hex)") }
    }

    static func failure(_ error: ClientError, _ what: String) -> RemoteFailure {
        switch error {
        case .notFound: return .missing("\(what): the server does not hold it")
        default: return .unavailable("\(what): \(error)")
        }
    }
}
