import Foundation
import Crypto
import Drive
import Storage

/// What the mirror does with the server's answer to one change (Docs/sync.md, "Conflicts").
extension MirrorEngine {
    /// Changes the server applied: each node's new state is the synced one, and its mark
    /// goes unless the inode changed again since it was read. One transaction for all.
    func settleApplied(_ applied: [(Planned, RemoteNode)], now: Int64) throws {
        if applied.isEmpty { return }
        try write {
            for (p, node) in applied {
                if node.deleted {
                    try MirrorRows.forget(ino: p.ino, in: db)
                } else {
                    try MirrorRows.save(SyncedNode(ino: p.ino, node: node), in: db)
                }
                try MirrorRows.clearDirty(p.ino, seq: p.seq, now: now, in: db)
            }
        }
        state.withLock { s in
            for (p, _) in applied {
                s.clashes[p.ino] = nil
                s.contentMissing.remove(p.ino)
                s.retryAfter[p.ino] = nil
            }
        }
    }

    func settle(_ p: Planned, _ outcome: ChangeOutcome, now: Int64) throws {
        switch outcome {
        case .applied(let node):
            try settleApplied([(p, node)], now: now)

        case .conflict(let theirs):
            try resolveConflict(p, theirs: theirs, now: now)

        case .nameTaken(let occupant):
            // Our new folder, where another device made one first (we had not heard of it
            // yet): they become one, as when the feed brings theirs first.
            if try mergeIntoTheirFolder(p, occupant) { return }
            // Moved here since it was planned (room made for the other side's node in the
            // same batch): the next pass sends it under the name it has now.
            if try movedSincePlanned(p) { return }
            // A swap of two names, or a name freed later in the same batch: tried again next
            // pass. Taken for good (another device's node): ours is kept under a conflict name.
            let clashes = state.withLock { s -> Int in s.clashes[p.ino, default: 0] += 1; return s.clashes[p.ino]! }
            let ownChange = try occupant.map { try MirrorRows.isDirty(try MirrorRows.synced(node: $0.id, in: db)?.ino ?? 0, in: db) } ?? false
            if clashes < 3 && ownChange { return }
            try renameToConflictName(p.ino)

        case .cycle(let theirs):
            // Two devices moved two folders into each other: the first move stands; ours goes
            // back where the server has the folder.
            guard let theirs else { return }
            try takeTheirs(p, theirs, now: now)

        case .notEmpty(let theirs):
            // A folder deleted here while another device added to it: the folder comes back.
            guard let theirs else { return }
            try restoreHere(p, theirs, now: now)

        case .parentMissing(let why):
            // A folder of ours the server does not have yet (its own put was refused in the
            // same batch: renamed, or merged with theirs since) is not one gone from it:
            // the node goes after its folder, at the next pass.
            if try parentNotSentAsNamed(p) { return }
            noteFailure(p.ino, "the workspace server has no folder for '\((try? drive.path(of: p.ino)) ?? nil ?? "#\(p.ino)")' (\(why)); move it to a folder that exists", retryIn: 300)

        case .contentMissing:
            // Sent with its blocks and still missing (a block collected between): the next
            // pass reads the content again.
            state.withLock { _ = $0.contentMissing.insert(p.ino) }

        case .serverFull:
            state.withLock {
                $0.status.serverFull = true
                $0.fullUntil = Date().timeIntervalSince1970 + 60
            }

        case .refused(let why):
            noteFailure(p.ino, "the workspace server refused the change of '\((try? drive.path(of: p.ino)) ?? nil ?? "#\(p.ino)")': \(why)", retryIn: 600)
        }
    }

    /// Our folder, new (never on the server), refused because a folder of the server
    /// holds its name and this device has not applied that one yet: our inode takes their
    /// node. The next pass finds it in sync, our children go up into it, and theirs come
    /// down into it. Returns false when that is not the case.
    private func mergeIntoTheirFolder(_ p: Planned, _ occupant: RemoteNode?) throws -> Bool {
        guard case .put(let ours, base: 0, _) = p.change, let theirs = occupant, !theirs.deleted,
              MirrorPlanner.clash(oursKind: ours.kind, theirsKind: theirs.kind) == .mergeFolders,
              theirs.parent == ours.parent, theirs.name == ours.name else { return false }
        return try write {
            guard try MirrorRows.synced(node: theirs.id, in: db) == nil else { return false }
            try MirrorRows.save(SyncedNode(ino: p.ino, node: theirs), in: db)
            return true
        }
    }

    /// Whether a put's inode is no longer where the put placed it.
    private func movedSincePlanned(_ p: Planned) throws -> Bool {
        guard case .put(let node, _, _) = p.change, let local = try drive.committedEntry(p.ino) else { return false }
        let parentID = local.parent == 1 ? RemoteNode.rootID : try MirrorRows.synced(ino: local.parent, in: db)?.node.id
        return parentID != node.parent || MirrorRules.wireName(local.name) != node.name
    }

    /// Whether the parent a put named is not (or no longer) this device's agreed folder on
    /// the server: not sent yet, waiting to be sent again, or known by another id since.
    private func parentNotSentAsNamed(_ p: Planned) throws -> Bool {
        guard case .put(let node, _, _) = p.change, let local = try drive.committedEntry(p.ino) else { return false }
        if local.parent == 1 { return node.parent != RemoteNode.rootID }
        guard let parent = try MirrorRows.synced(ino: local.parent, in: db) else { return true }
        if parent.node.version == 0 || parent.node.id != node.parent { return true }
        return try MirrorRows.isDirty(local.parent, in: db)
    }

    private func resolveConflict(_ p: Planned, theirs: RemoteNode, now: Int64) throws {
        let base = p.base ?? theirs
        switch p.change {
        case .delete:
            switch MirrorPlanner.resolveDelete(base: base, theirs: theirs) {
            case .done:
                try write {
                    try MirrorRows.forget(ino: p.ino, in: db)
                    try MirrorRows.clearDirty(p.ino, seq: p.seq, now: now, in: db)
                }
            case .restore:
                try restoreHere(p, theirs, now: now)
            case .deleteAgain:
                var rebased = base
                rebased.version = theirs.version
                rebased.parent = theirs.parent; rebased.name = theirs.name
                try write { try MirrorRows.save(SyncedNode(ino: p.ino, node: rebased), in: db) }
            }
        case .put(let ours, _, _):
            if p.base == nil && !theirs.deleted && theirs.sameState(as: ours) {
                // Our create, sent again after a kill: it was applied the first time.
                try settle(p, .applied(theirs), now: now)
                return
            }
            switch MirrorPlanner.resolvePut(ours: ours, base: base, theirs: theirs) {
            case .merge(let local, _):
                // Take their parts here, then our parts go up on their version next pass.
                let lists = try remoteBlocks(local, unless: ours.hash)
                try drive.applyExternal(owner: owner) { edit in
                    try bring(p.ino, to: local, lists, edit)
                    var agreed = theirs
                    if theirs.deleted { agreed = base; agreed.version = theirs.version }
                    try MirrorRows.save(SyncedNode(ino: p.ino, node: agreed), in: edit.database)
                }
            case .conflictCopy:
                try conflictCopy(p, theirs: theirs)
            }
        }
    }

    /// Both changed the content: ours keeps its inode under a conflict name as a new node
    /// (created next pass); theirs comes here as a new inode under the name.
    private func conflictCopy(_ p: Planned, theirs: RemoteNode) throws {
        let lists = try remoteBlocks(theirs, unless: nil)
        try drive.applyExternal(owner: owner) { edit in
            let db = edit.database
            guard let local = try edit.entry(p.ino) else { return }
            try moveToConflictName(parent: local.parent, name: local.name, edit)
            try MirrorRows.forget(ino: p.ino, in: db)
            try MirrorRows.markDirty(p.ino, now: MirrorClock.nanoseconds(), in: db)
            // Theirs in a folder this device has not heard of yet: it comes down with it.
            guard let parent = try inode(of: theirs.parent, db) else { try MirrorRows.saveRemote(theirs, in: db); return }
            // Their place may hold something of ours made since (our file renamed away,
            // then a new one under its old name): it is freed by the rule of every remote
            // change (our new node takes a conflict name, both kept).
            let name = Array(theirs.name.utf8)
            let ino: UInt64
            if let merged = try makeRoom(parent, name, for: theirs, edit) {
                ino = merged
            } else {
                ino = try edit.create(parent: parent, name: name, kind: kind(theirs.kind), permissions: permissions(theirs),
                                      mtime: theirs.mtimeWhenMade, target: theirs.target.map { Array($0.utf8) })
            }
            if let hash = theirs.hash, let content = SHA256Digest(hex: hash), theirs.kind == .file {
                try edit.setContent(ino, content: content, blocks: lists ?? [], size: theirs.size, mtime: theirs.mtime)
            }
            try MirrorRows.save(SyncedNode(ino: ino, node: theirs), in: db)
        }
        state.withLock { $0.status.conflicts += 1 }
    }

    /// Ours gives way: the inode takes the server's state, and the mark is cleared.
    private func takeTheirs(_ p: Planned, _ theirs: RemoteNode, now: Int64) throws {
        let lists = try remoteBlocks(theirs, unless: nil)
        try drive.applyExternal(owner: owner) { edit in
            try bring(p.ino, to: theirs, lists, edit)
            try MirrorRows.save(SyncedNode(ino: p.ino, node: theirs), in: edit.database)
        }
        try write { try MirrorRows.clearDirty(p.ino, seq: p.seq, now: now, in: db) }
    }

    /// A node deleted here that the server keeps (edited elsewhere, or a folder given a new
    /// child): made again here from the server's state, as a new inode.
    private func restoreHere(_ p: Planned, _ theirs: RemoteNode, now: Int64) throws {
        try write {
            try MirrorRows.forget(ino: p.ino, in: db)
            try MirrorRows.clearDirty(p.ino, seq: p.seq, now: now, in: db)
            var again = theirs
            again.version = theirs.version
            try MirrorRows.saveRemote(again, in: db)
        }
        wake()
    }

    /// Moves, renames and sets the content and attributes of a local inode to `node`.
    private func bring(_ ino: UInt64, to node: RemoteNode, _ lists: [SHA256Digest]?, _ edit: ExternalEdit) throws {
        guard let local = try edit.entry(ino), let parent = try inode(of: node.parent, edit.database) else { return }
        let name = Array(node.name.utf8)
        if local.parent != parent || local.name != name {
            if try edit.child(parent, name) == nil {
                try edit.move(parent: local.parent, name: local.name, to: parent, name)
            }
        }
        if node.kind == .file, let hash = node.hash, hash != local.content?.hex ?? Self.emptyContent, let content = SHA256Digest(hex: hash) {
            try edit.setContent(ino, content: content, blocks: lists ?? [], size: node.size, mtime: node.mtime)
        }
        let wanted = MirrorRules.permissions(local.permissions, executable: node.executable)
        if node.kind == .file && (wanted != nil || local.mtime != node.mtime) {
            try edit.setAttributes(ino, permissions: wanted, mtime: node.mtime)
        }
    }

    /// The block list of `node`'s content, unless it is `known` (ours) or empty.
    private func remoteBlocks(_ node: RemoteNode, unless known: String?) throws -> [SHA256Digest]? {
        guard node.kind == .file, let hash = node.hash, hash != known, node.size > 0 else { return nil }
        let list = try server.blockList(of: hash).compactMap(SHA256Digest.init(hex:))
        guard ContentHash.of(blocks: list).hex == hash else { throw MirrorRefusal("the server's block list of \(hash) does not match it") }
        return list
    }

    /// Ours keeps its content under a conflict name (its put goes again next pass).
    private func renameToConflictName(_ ino: UInt64) throws {
        try drive.applyExternal(owner: owner) { edit in
            guard let local = try edit.entry(ino) else { return }
            try moveToConflictName(parent: local.parent, name: local.name, edit)
            try MirrorRows.markDirty(ino, now: MirrorClock.nanoseconds(), in: edit.database)
        }
        state.withLock { $0.status.conflicts += 1; $0.clashes[ino] = nil }
    }
}
