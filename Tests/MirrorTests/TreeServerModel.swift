import Foundation
import Synchronization
import Drive
@testable import WorkspaceMirror

/// The workspace tree's rules (Docs/sync.md, "Wire format") held in memory: the server the
/// logic-tier tests run the mirror against. The real server (`vdrive serve`) is tested
/// against the same rules in ServerTests, and the mirror against it end to end.
final class TreeServerModel: MirrorServer, @unchecked Sendable {   // all state under `lock`
    private let lock = NSLock()
    private var nodes: [String: RemoteNode] = [:]
    private var version: Int64 = 0
    private var contents: [String: [String]] = [:]
    /// Changes answered so far (puts and deletes), and contents sent.
    private(set) var changesReceived = 0
    /// Deletes applied (a node put in the trash).
    private(set) var deletesApplied = 0
    private(set) var contentsSent = 0
    /// Blocks sent (a put naming a new content is refused until its blocks are here).
    private var blocks = Set<String>()
    /// When set, every call fails as an unreachable server.
    var offline = false
    /// Names whose puts are refused for good (as a server refuses a change it cannot take).
    var refusedNames: Set<String> = []
    /// When set, blocks are refused as by a workspace over its quota (changes are not).
    var full = false

    /// Sends (of changes or contents) that failed as unreachable.
    var refusedSends: Int { lock.withLock { refused } }
    private var refused = 0

    /// `send`: a send of changes or contents, counted in `refusedSends` when refused.
    private func unreachable(send: Bool = false) throws {
        guard offline else { return }
        if send { lock.withLock { refused += 1 } }
        throw MirrorUnreachable("the test server is offline")
    }

    func page(since: Int64, wait: Int, stop: @escaping @Sendable () -> Bool) throws -> RemotePage {
        try unreachable()
        return lock.withLock {
            var out: [RemoteNode] = []
            var sent = Set<String>()
            func emit(_ n: RemoteNode) {
                if sent.contains(n.id) { return }
                if n.parent != RemoteNode.rootID, let p = nodes[n.parent], p.version > since { emit(p) }
                sent.insert(n.id)
                // As the server's feed does for small files; every other version without,
                // so that both ways of learning a block list are taken.
                var n = n
                if n.kind == .file, !n.deleted, n.version % 2 == 0, let hash = n.hash { n.blocks = contents[hash] }
                out.append(n)
            }
            for n in nodes.values.filter({ $0.version > since }).sorted(by: { $0.version < $1.version }) { emit(n) }
            return RemotePage(nodes: out, next: out.map(\.version).max() ?? since, latest: version, workspace: "0123456789abcdef0123456789abcdef")
        }
    }

    func send(_ changes: [NodeChange]) throws -> [ChangeOutcome] {
        try unreachable(send: true)
        return lock.withLock { changes.map(apply) }
    }

    func sendContents(_ uploads: [OutgoingContent], open: (String) throws -> StoredBlock,
                      stop: @escaping @Sendable () -> Bool) throws -> [String: String] {
        try unreachable(send: true)
        if full { throw MirrorServerFull("the test server is over its quota") }
        var unread: [String: String] = [:]
        for u in uploads {
            do {
                for b in u.blocks {
                    if case .file(let fd) = try open(b) { close(fd) }
                }
            } catch {
                unread[u.content] = "\(error)"
                continue
            }
            lock.withLock { blocks.formUnion(u.blocks); contentsSent += 1 }
        }
        return unread
    }

    func blockList(of content: String) throws -> [String] {
        try unreachable()
        guard let list = lock.withLock({ contents[content] }) else { throw MirrorRefusal("unknown content \(content)") }
        return list
    }

    func presentContents(_ hashes: [String]) throws -> Set<String> {
        try unreachable()
        return lock.withLock { Set(hashes.filter { contents[$0] != nil }) }
    }

    /// The live tree: path → node (for comparing with a drive).
    func livePaths() -> [String: RemoteNode] {
        lock.withLock {
            var out: [String: RemoteNode] = [:]
            for n in nodes.values where isLive(n) { out[path(n)] = n }
            return out
        }
    }

    private func path(_ n: RemoteNode) -> String {
        var parts = [n.name]
        var p = n.parent
        while p != RemoteNode.rootID, let up = nodes[p] { parts.append(up.name); p = up.parent }
        return parts.reversed().joined(separator: "/")
    }

    private func isLive(_ n: RemoteNode) -> Bool {
        if n.deleted { return false }
        var p = n.parent
        var steps = 0
        while p != RemoteNode.rootID {
            guard let up = nodes[p], !up.deleted, steps < 10_000 else { return false }
            p = up.parent; steps += 1
        }
        return true
    }

    private func bump(_ n: inout RemoteNode) {
        version += 1
        n.version = version
        nodes[n.id] = n
    }

    private func apply(_ change: NodeChange) -> ChangeOutcome {
        changesReceived += 1
        switch change {
        case .delete(let id, let base):
            guard var n = nodes[id] else { return .refused("unknown node") }
            if n.version != base { return .conflict(n) }
            if n.deleted { return .applied(n) }
            if n.kind == .folder, nodes.values.contains(where: { $0.parent == id && !$0.deleted }) { return .notEmpty(n) }
            n.deleted = true
            bump(&n)
            deletesApplied += 1
            return .applied(n)
        case .put(var node, let base, let blocks):
            if refusedNames.contains(node.name) { return .refused("the test server refuses '\(node.name)'") }
            let existing = nodes[node.id]
            if let existing {
                if !existing.deleted, existing.sameState(as: node) { return .applied(existing) }
                if existing.version != base { return .conflict(existing) }
                if existing.kind != node.kind { return .refused("kind") }
            } else if base != 0 {
                return .parentMissing("no node has id \(node.id)")
            }
            if node.parent != RemoteNode.rootID {
                guard let p = nodes[node.parent], p.kind == .folder else { return .parentMissing("no folder has id \(node.parent)") }
                _ = p
            }
            if let occupant = nodes.values.first(where: { $0.parent == node.parent && $0.name == node.name && $0.id != node.id && !$0.deleted }) {
                return .nameTaken(occupant)
            }
            if node.kind == .folder {
                var p = node.parent
                while p != RemoteNode.rootID, let up = nodes[p] {
                    if up.id == node.id { return .cycle(existing) }
                    p = up.parent
                }
            }
            if node.kind == .file, let hash = node.hash, contents[hash] == nil {
                guard let list = blocks else { return .contentMissing([]) }
                let missing = list.filter { !self.blocks.contains($0) }
                if !missing.isEmpty { return .contentMissing(missing) }
                contents[hash] = list
            }
            // A put into a folder in the trash brings the folder back (and its trashed ancestors).
            var p = node.parent
            while p != RemoteNode.rootID, var up = nodes[p] {
                if up.deleted { up.deleted = false; bump(&up) }
                p = up.parent
            }
            node.deleted = false
            node.device = "model"
            bump(&node)
            return existing == nil ? .applied(node) : .applied(node)
        }
    }
}
