import Foundation
import Client
import Drive
import Crypto
import HTTPClient
import Protocol
import Storage
import WorkspaceMirror

/// The mirror's `MirrorServer` over `WorkspaceClient`: the tree's calls, and a content's
/// blocks sent by the same upload plan as the backup's (tus, or presigned PUTs to a
/// scaled server's store). The one place where the wire's answers become the mirror's
/// outcomes.
final class ClientMirrorServer: MirrorServer {
    private let client: WorkspaceClient
    /// A second client for the held feed request, so a long poll never waits behind a
    /// change being sent (one connection each).
    private let feed: WorkspaceClient
    /// A feed the held tree request watches too (`Backups/`' records), nil: the tree's alone.
    private let carried: CarriedFeed?

    init(remote: RemoteConfig, carrying carried: CarriedFeed? = nil) throws {
        client = try remote.client(timeouts: Timeouts(connect: 5, lowSpeedSeconds: 30))
        feed = try remote.client(timeouts: Timeouts(connect: 5, lowSpeedSeconds: 30))
        self.carried = carried
    }

    /// The tree's page, held up to `wait` seconds. The request also carries the records
    /// follower's cursor: an answer naming another end of that feed tells the follower
    /// (which reads it on its own connection), and when the tree brought nothing the
    /// request is held again for the rest of the wait, so the mirror sees only the tree.
    func page(since: Int64, wait: Int, stop: @escaping @Sendable () -> Bool) throws -> RemotePage {
        let deadline = Date().addingTimeInterval(Double(wait))
        var hold = wait
        while true {
            let recordsSince = carried?.knownEnd
            let page = try mapped { try feed.treePage(since: since, wait: hold, recordsSince: recordsSince, cancelled: stop) }
            carried?.feedEnds(at: page.recordsLatest)
            let onlyRecordsMoved = page.nodes.isEmpty && page.latest >= since && recordsSince != nil
                && page.recordsLatest.map { $0 != recordsSince } == true
            hold = Int(deadline.timeIntervalSinceNow)
            guard onlyRecordsMoved, hold >= 1, !stop() else {
                return RemotePage(nodes: page.nodes.map(Self.node), next: page.next, latest: page.latest, workspace: page.workspace)
            }
        }
    }

    func send(_ changes: [NodeChange]) throws -> [ChangeOutcome] {
        let wire: [TreeChange] = changes.map { change in
            switch change {
            case .delete(let id, let base):
                return .delete(id: id, base: base)
            case .put(let n, let base, let blocks):
                return .put(TreePut(id: n.id, base: base, parent: n.parent, name: n.name, kind: TreeNodeKind(rawValue: n.kind.rawValue) ?? .file,
                                    hash: n.kind == .file ? n.hash : nil, size: n.kind == .file ? n.size : nil, blocks: blocks,
                                    mtime: n.mtime, executable: n.kind == .file ? n.executable : nil,
                                    target: n.kind == .symlink ? n.target : nil))
            }
        }
        let results = try mapped { try client.applyTreeChanges(wire) }
        return results.map(Self.outcome)
    }

    /// Contents of at most this size (1 MiB) go up in block packs: for such a file the
    /// round trip and the server's durable commit per request are most of its cost, and a
    /// pack pays them once for hundreds of files. Larger ones go through the upload plan,
    /// resumable mid-block and, on a scaled server, straight to its object store.
    static let packedContentBytes: Int64 = 1 << 20
    /// Blocks (and their open descriptors) gathered before a pack goes.
    static let packBlocks = 512

    func sendContents(_ contents: [OutgoingContent], open: (String) throws -> StoredBlock,
                      stop: @escaping @Sendable () -> Bool) throws -> [String: String] {
        var unread: [String: String] = [:]
        var pack: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)] = []
        /// The content each block of `pack` was gathered for.
        var owners: [String] = []
        defer { Self.close(pack) }
        var packed = Set<SHA256Digest>()
        func flush() throws {
            defer { Self.close(pack); pack = []; owners = [] }
            if pack.isEmpty { return }
            do { _ = try client.sendBlockPack(pack) } catch .contentMismatch(let why) {
                // A block whose bytes are not its hash any more (damaged on this drive): the
                // server took the packs before it. Each content again on its own, so the
                // damaged ones are left out and the others go.
                for content in Set(owners) {
                    let mine = zip(pack, owners).filter { $0.1 == content }.map(\.0)
                    do { _ = try client.sendBlockPack(mine) } catch .contentMismatch {
                        unread[content] = "its bytes are damaged on this drive (\(why))"
                    } catch { throw Self.failure(error) }
                }
            } catch {
                throw Self.failure(error)
            }
        }
        for c in contents {
            if stop() { throw MirrorUnreachable("stopped") }
            guard c.size <= Self.packedContentBytes else {
                do { try sendContent(c, open: open, stop: stop) } catch let e as Errno { unread[c.content] = "\(e)" }
                continue
            }
            let wanted = Set(c.missing.isEmpty ? c.blocks : c.missing)
            var mine: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)] = []
            do {
                for (index, hex) in c.blocks.enumerated() where wanted.contains(hex) {
                    let length = Blocks.length(ofBlock: index, fileSize: c.size)
                    guard let digest = SHA256Digest(hex: hex), length > 0, !Blocks.isZero(digest, length: length),
                          !packed.contains(digest) else { continue }
                    switch try open(hex) {
                    case .file(let fd): mine.append((digest, .file(fd), length))
                    case .inline(let bytes): mine.append((digest, .memory(bytes), length))
                    }
                    packed.insert(digest)
                }
            } catch let e as Errno {
                Self.close(mine)
                for b in mine { packed.remove(b.digest) }
                unread[c.content] = "\(e)"
                continue
            }
            pack += mine
            owners += Array(repeating: c.content, count: mine.count)
            if pack.count >= Self.packBlocks { try flush() }
        }
        try flush()
        return unread
    }

    /// Closes the descriptors of a pack's blocks read from files.
    private static func close(_ blocks: [(digest: SHA256Digest, bytes: OutgoingBlockBytes, length: Int)]) {
        for case .file(let fd) in blocks.map(\.bytes) { FileIO.close(fd) }
    }

    /// One content through the upload plan: the server names the blocks it lacks and how
    /// each goes (tus, or a presigned PUT to a scaled server's store).
    private func sendContent(_ c: OutgoingContent, open: (String) throws -> StoredBlock, stop: @escaping @Sendable () -> Bool) throws {
        guard let digest = SHA256Digest(hex: c.content) else { throw MirrorRefusal("not a content hash: \(c.content)") }
        let list = c.blocks.compactMap(SHA256Digest.init(hex:))
        var renewals = 0
        while true {
            guard case .blocks(let tickets, _) = try mapped({ try client.createUpload(content: digest, size: c.size, blocks: list) }) else { return }
            do {
                for ticket in tickets {
                    // A block kept in the catalog is small: only the last of a larger file's
                    // blocks may be, and it goes from a memory file like any other.
                    let fd: Int32
                    switch try open(ticket.hash.hex) {
                    case .file(let file): fd = file
                    case .inline(let bytes): fd = try BlobStore.memoryFile(holding: bytes)
                    }
                    defer { FileIO.close(fd) }
                    // The block's bytes alone: its own file, from offset 0.
                    var alone = ticket
                    alone.index = 0
                    try client.uploadBlock(alone, fd: fd, progress: { _ in !stop() })
                }
                return
            } catch ClientError.expired where renewals < 3 {
                renewals += 1
            } catch let error as ClientError {
                throw Self.failure(error)
            }
        }
    }

    func blockList(of content: String) throws -> [String] {
        guard let digest = SHA256Digest(hex: content) else { throw MirrorRefusal("not a content hash: \(content)") }
        return try mapped { try client.contentBlocks(digest) }.blocks.map(\.hex)
    }

    func presentContents(_ contents: [String]) throws -> Set<String> {
        let digests = contents.compactMap(SHA256Digest.init(hex:))
        return Set(try mapped { try client.presentContents(digests) }.map(\.hex))
    }

    /// The device name the token belongs to (for conflict copies' names).
    func deviceName() throws -> String { try mapped { try client.deviceName() } }

    static func node(_ n: TreeNode) -> RemoteNode {
        RemoteNode(id: n.id, parent: n.parent, name: n.name, kind: RemoteNode.Kind(rawValue: n.kind.rawValue) ?? .file, hash: n.hash,
                   size: n.size ?? 0, mtime: n.mtime, executable: n.executable ?? false, target: n.target, version: n.version,
                   deleted: n.deleted, device: n.device, blocks: n.blocks)
    }

    static func outcome(_ r: TreeResult) -> ChangeOutcome {
        if r.status == 200 || r.status == 201, let applied = r.node { return .applied(Self.node(applied)) }
        let current = r.node.map(Self.node)
        switch r.error {
        case TreeResult.conflict: return current.map(ChangeOutcome.conflict) ?? .refused("a conflict without the current node")
        case TreeResult.nameTaken: return .nameTaken(current)
        case TreeResult.cycle: return .cycle(current)
        case TreeResult.notEmpty: return .notEmpty(current)
        case TreeResult.parentMissing: return .parentMissing(r.message ?? "the parent folder is not in the workspace")
        case "missing_blocks", "content_missing", "size_conflict": return .contentMissing(r.missing ?? [])
        default:
            if r.status == 507 { return .serverFull }
            return .refused([r.error, r.field.map { "field \($0)" }, r.message].compactMap { $0 }.joined(separator: ": "))
        }
    }

    private func mapped<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as ClientError { throw Self.failure(error) }
    }

    static func failure(_ error: ClientError) -> Error {
        switch error {
        case .unreachable, .timedOut: return MirrorUnreachable(error.description)
        case .http(507, _): return MirrorServerFull(error.description)
        default: return error
        }
    }
}
