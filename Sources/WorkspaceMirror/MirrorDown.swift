import Foundation
import Crypto
import Drive
import Storage

/// Down: the server's changes applied to the catalog, each in one transaction with the
/// mirror's rows (`DriveFileSystem.applyExternal`), so a kill leaves either the change
/// applied and recorded, or neither (it is applied again from `mirror_remote`).
extension MirrorEngine {
    enum Applied { case done, deferred }

    /// Applies what the feed brought for at most `budget` seconds, so that while other
    /// devices keep changing the workspace this device's own changes still go up between
    /// (a pass applies, then sends). Returns true when rows may remain.
    @discardableResult
    func applyRemote(budget: Double = 0.5) throws -> Bool {
        let deadline = Date().addingTimeInterval(budget)
        var deferred = Set<String>()
        var arrived: [(blocks: [SHA256Digest], size: Int64)] = []
        defer { if !arrived.isEmpty { arrivals?.contentsArrived(arrived) } }
        while !stopping {
            let rows = try MirrorRows.remote(limit: 512, in: db).filter { !deferred.contains($0.id) }
            if rows.isEmpty { return false }
            var progressed = false
            for start in stride(from: 0, to: rows.count, by: Self.applyBatch) {
                if stopping { return false }
                if Date() > deadline { return true }
                let batch = Array(rows[start..<min(start + Self.applyBatch, rows.count)])
                let lists = try batch.map { try blockLists(for: $0) }
                // Together in one transaction (one commit for many small files); when one
                // of them fails, each again on its own, so that it alone waits.
                var outcomes: [Applied?]
                do {
                    outcomes = try drive.applyExternal(owner: owner) { edit in try zip(batch, lists).map { try apply($0, $1, edit) } }
                } catch let e as MirrorUnreachable {
                    throw e
                } catch {
                    outcomes = batch.indices.map { i in applyAlone(batch[i], lists[i]) }
                }
                for (i, outcome) in outcomes.enumerated() {
                    let r = batch[i]
                    guard let outcome else { deferred.insert(r.id); continue }
                    state.withLock { _ = $0.unapplied.removeValue(forKey: r.id) }
                    if outcome == .done, let list = lists[i] { arrived.append((list, r.size)) }
                    if outcome == .deferred { deferred.insert(r.id) } else { progressed = true }
                }
            }
            if !progressed { return false }
        }
        return false
    }

    /// Remote nodes applied in one transaction at most.
    static let applyBatch = 64

    /// One node in a transaction of its own; nil when it cannot be applied yet. One node
    /// that cannot be applied must not stop the others: it stays, and is tried again at
    /// the next pass (a move into a folder that is inside it here waits until this
    /// device's own move of that folder is settled).
    private func applyAlone(_ r: RemoteNode, _ lists: [SHA256Digest]?) -> Applied? {
        do {
            return try drive.applyExternal(owner: owner) { edit in try apply(r, lists, edit) }
        } catch {
            let text = "could not apply the workspace's change to '\(r.name)': \(error)"
            let first = state.withLock { s -> Bool in
                defer { s.unapplied[r.id] = text }
                return s.unapplied[r.id] != text
            }
            if first { MirrorLog.error(text) }
            return nil
        }
    }

    /// The block list of a content this node brings that the drive does not know.
    private func blockLists(for r: RemoteNode) throws -> [SHA256Digest]? {
        guard r.kind == .file, !r.deleted, r.size > 0, let hash = r.hash else { return nil }
        if let s = try MirrorRows.synced(node: r.id, in: db), s.node.hash == hash { return nil }
        let fits = { (list: [SHA256Digest]) in list.count == Blocks.count(forSize: r.size) && ContentHash.of(blocks: list).hex == hash }
        // The feed's list when it came with the node (small files), else asked for.
        if let brought = r.blocks?.compactMap(SHA256Digest.init(hex:)), fits(brought) { return brought }
        let list = try server.blockList(of: hash).compactMap(SHA256Digest.init(hex:))
        guard fits(list) else { throw MirrorRefusal("the server's block list of \(hash) does not match it") }
        return list
    }

    private func apply(_ r: RemoteNode, _ lists: [SHA256Digest]?, _ edit: ExternalEdit) throws -> Applied {
        let db = edit.database
        let done = { try MirrorRows.dropRemote(r.id, upTo: r.version, in: db) }
        let s = try MirrorRows.synced(node: r.id, in: db)
        if let s, s.node.version > 0, r.version <= s.node.version { try done(); return .done }
        // A node changed here too, or being written: the way up settles it (the server
        // refuses the stale base and the conflict rules decide).
        if let s, try MirrorRows.isDirty(s.ino, in: db) || drive.hasWriters(s.ino) { return .deferred }
        let local = try s.flatMap { try edit.entry($0.ino) }

        if r.deleted {
            guard let s, let local else {
                if let s { try MirrorRows.forget(ino: s.ino, in: db) }
                try done(); return .done
            }
            if local.kind == .folder,
               try db.queryOne("SELECT 1 FROM entries WHERE parent = ? LIMIT 1", local.ino, row: { _ in true }) ?? false {
                // Its children go first (the server deletes a folder only when empty); one
                // made here and not sent keeps the folder: it is sent again, and comes back.
                let unsent = try db.queryOne("""
                    SELECT 1 FROM entries e LEFT JOIN mirror_nodes m ON m.ino = e.ino WHERE e.parent = ? AND (m.ino IS NULL OR m.version = 0) LIMIT 1
                    """, local.ino, row: { _ in true }) ?? false
                guard unsent else { return .deferred }
                var kept = s
                kept.node.version = r.version
                try MirrorRows.save(kept, in: db)
                try MirrorRows.markDirty(local.ino, now: MirrorClock.nanoseconds(), in: db)
                try done(); return .done
            }
            try edit.remove(parent: local.parent, name: local.name)
            try MirrorRows.forget(ino: s.ino, in: db)
            try done(); return .done
        }

        guard let parentIno = try inode(of: r.parent, db) else { return .deferred }
        if parentIno == 1 && r.name == MirrorRules.cameraRoll {
            MirrorLog.error("the workspace has a folder called '\(MirrorRules.cameraRoll)' at its root; this drive keeps that name for its own photos and does not show it")
            try done(); return .done
        }
        let name = Array(r.name.utf8)
        var ino: UInt64
        if let local {
            ino = local.ino
            if local.parent != parentIno || local.name != name {
                _ = try makeRoom(parentIno, name, for: r, edit)
                try edit.move(parent: local.parent, name: local.name, to: parentIno, name)
            }
            if r.kind == .file, let hash = r.hash, hash != s?.node.hash {
                try setContent(ino, r, hash, lists, edit)
            }
            try setAttributes(ino, local, r, edit)
        } else {
            if let s { try MirrorRows.forget(ino: s.ino, in: db) }
            if let merged = try makeRoom(parentIno, name, for: r, edit) {
                ino = merged
            } else {
                ino = try edit.create(parent: parentIno, name: name, kind: kind(r.kind), permissions: permissions(r), mtime: r.mtimeWhenMade,
                                      target: r.target.map { Array($0.utf8) })
                if r.kind == .file, let hash = r.hash, r.size > 0 { try setContent(ino, r, hash, lists, edit) }
            }
        }
        try MirrorRows.save(SyncedNode(ino: ino, node: r), in: db)
        try done()
        return .done
    }

    /// The local inode of a node id (the root is the drive's root).
    func inode(of id: String, _ db: Database) throws -> UInt64? {
        if id == RemoteNode.rootID { return 1 }
        return try MirrorRows.synced(node: id, in: db)?.ino
    }

    /// Frees `(parent, name)` for `r`. A node made here and not on the server yet (no
    /// row, or its id kept at a send the server never acknowledged: sent while it was
    /// down) keeps its place only if both are folders (they become one: the returned
    /// inode takes `r`'s id); otherwise it takes a conflict name (both kept). A synced
    /// node still there is one whose own move has not been applied yet: it waits under
    /// a hidden name.
    func makeRoom(_ parent: UInt64, _ name: [UInt8], for r: RemoteNode, _ edit: ExternalEdit) throws -> UInt64? {
        guard let occupant = try edit.child(parent, name) else { return nil }
        let db = edit.database
        let synced = try MirrorRows.synced(ino: occupant.ino, in: db)
        let dirty = try MirrorRows.isDirty(occupant.ino, in: db)
        if synced == nil || synced?.node.version == 0 || dirty {
            let ours: RemoteNode.Kind = occupant.kind == .folder ? .folder : occupant.kind == .symlink ? .symlink : .file
            if (synced?.node.version ?? 0) == 0, MirrorPlanner.clash(oursKind: ours, theirsKind: r.kind) == .mergeFolders {
                try db.run("DELETE FROM mirror_dirty WHERE ino = ?", occupant.ino)
                return occupant.ino
            }
            try moveToConflictName(parent: parent, name: name, edit)
            try MirrorRows.markDirty(occupant.ino, now: MirrorClock.nanoseconds(), in: db)
            state.withLock { $0.status.conflicts += 1 }
            return nil
        }
        try edit.move(parent: parent, name: name, to: parent, Array((MirrorRules.movingPrefix + synced!.node.id).utf8))
        return nil
    }

    private func setContent(_ ino: UInt64, _ r: RemoteNode, _ hash: String, _ lists: [SHA256Digest]?, _ edit: ExternalEdit) throws {
        guard let content = SHA256Digest(hex: hash) else { throw MirrorRefusal("the server sent a content hash that is not one: \(hash)") }
        if r.size == 0 {
            try edit.setContent(ino, content: content, blocks: [], size: 0, mtime: r.mtime)
            return
        }
        guard let lists else { throw MirrorRefusal("no block list for \(hash)") }
        try edit.setContent(ino, content: content, blocks: lists, size: r.size, mtime: r.mtime)
    }

    private func setAttributes(_ ino: UInt64, _ local: DriveEntry, _ r: RemoteNode, _ edit: ExternalEdit) throws {
        let wanted = MirrorRules.permissions(local.permissions, executable: r.executable)
        if wanted != nil || (r.kind != .folder && local.mtime != r.mtime) {
            try edit.setAttributes(ino, permissions: wanted, mtime: r.kind == .folder ? nil : r.mtime)
        }
    }

    /// Moves the name `(parent, name)` here to its conflict name beside it: ours is kept
    /// under it (and sent under it), the other side's version takes the name.
    func moveToConflictName(parent: UInt64, name: [UInt8], _ edit: ExternalEdit) throws {
        let text = MirrorRules.wireName(name) ?? "file"
        let newName = MirrorRules.conflictName(text, device: device, at: Int64(Date().timeIntervalSince1970)) {
            (try? edit.child(parent, Array($0.utf8))) != nil
        }
        try edit.move(parent: parent, name: name, to: parent, Array(newName.utf8))
    }

    func kind(_ k: RemoteNode.Kind) -> DriveEntry.Kind {
        switch k {
        case .file: return .file
        case .folder: return .folder
        case .symlink: return .symlink
        }
    }

    func permissions(_ r: RemoteNode) -> UInt32 {
        switch r.kind {
        case .folder: return 0o755
        case .symlink: return 0o777
        case .file: return r.executable ? 0o755 : 0o644
        }
    }
}
