import Foundation
import Crypto
import Drive
import Storage

/// Up: the journal's dirty inodes, once settled, compared with what was last agreed and
/// sent as changes on that base (Docs/sync.md, "The device: up").
extension MirrorEngine {
    /// One planned change: the inode, the journal mark it answers, and the change.
    struct Planned {
        var ino: UInt64
        var seq: Int64
        var change: NodeChange
        var base: RemoteNode?
        var depth: Int
    }

    static let emptyContent = ContentHash.of(blocks: []).hex

    /// Sends what is due; returns how long until the next inode is due (seconds), and
    /// whether anything was sent.
    func sendLocal(force: Bool) throws -> (wait: Double, sent: Bool) {
        let now = MirrorClock.nanoseconds()
        let quiet = Int64(settings.quiet * 1e9), most = Int64(settings.most * 1e9)
        let clock = Date().timeIntervalSince1970
        let (held, fullUntil) = state.withLock { ($0.retryAfter, $0.fullUntil) }
        if !force && clock < fullUntil { return (fullUntil - clock, false) }
        // Paused, a metered network, a low battery: content does not go up (changes that
        // need no bytes do: moves, deletes, folders, content the server has).
        let holding = transferHold?()
        let heldContent = state.withLock { s -> [UInt64: Int64] in
            s.status.held = holding
            if holding == nil { s.heldContent = [:] }
            return s.heldContent
        }
        var nextDue = Double.infinity
        var planned: [UInt64: Planned] = [:]
        var order: [UInt64] = []
        // The journal wakes this thread inside the change's own transaction, which the
        // drive's group commit may keep open for a few milliseconds: read before it
        // commits, the mark is not there yet, and the wake would be spent on nothing
        // (the change then waited for the next pass, seconds later).
        try drive.commitOpenChanges()
        var dirtyRows = try MirrorRows.dirty(limit: 4096, in: db)
        dirtyRows.sort { $0.ino < $1.ino }
        let bySeq = Dictionary(uniqueKeysWithValues: dirtyRows.map { ($0.ino, $0) })
        var visiting = Set<UInt64>()
        // New nodes' ids, kept before anything is sent: saved together before the slice goes
        // (one transaction for the slice, not one per file, beside the drive's writer).
        var newNodes: [UInt64: SyncedNode] = [:]
        func known(_ ino: UInt64) throws -> SyncedNode? { try newNodes[ino] ?? MirrorRows.synced(ino: ino, in: db) }
        // The inodes that may take over a gone node's place (asked once a pass, when a
        // synced node is gone: none in an `rm -r`, which then costs no lookup per file).
        var newHereOnce: Set<UInt64>?
        func newHere() throws -> Set<UInt64> {
            if let newHereOnce { return newHereOnce }
            let found = try MirrorRows.dirtyUnknown(in: db)
            newHereOnce = found
            return found
        }

        /// Plans one inode (its parent first, when the parent is new too). Returns false when
        /// it cannot be sent yet.
        func plan(_ d: MirrorRows.Dirty) throws -> Bool {
            if planned[d.ino] != nil { return true }
            if visiting.contains(d.ino) { return false }
            visiting.insert(d.ino); defer { visiting.remove(d.ino) }
            if let hold = held[d.ino], clock < hold.until, d.changed <= hold.failedAt { return false }
            if let at = heldContent[d.ino], d.changed <= at {
                nextDue = min(nextDue, Self.holdCheck)   // the hold is asked again then
                return false
            }
            if !force {
                if !MirrorPlanner.isDue(changed: d.changed, since: d.since, now: now, quiet: quiet, most: most) {
                    let due = Double(min(d.changed + quiet, d.since + most) - now) / 1e9
                    nextDue = min(nextDue, max(0.01, due))
                    return false
                }
            }
            if drive.hasWriters(d.ino) { nextDue = min(nextDue, 0.5); return false }
            let s = try MirrorRows.synced(ino: d.ino, in: db)
            guard let local = try drive.committedEntry(d.ino), let placement = try place(local, isKnown: { newNodes[$0] != nil }) else {
                // Gone here, or out of the workspace (into the Camera Roll, a temporary name).
                guard let s, s.node.version > 0 else {
                    try write {
                        try MirrorRows.forget(ino: d.ino, in: db)
                        try MirrorRows.clearDirty(d.ino, seq: d.seq, now: now, in: db)
                    }
                    return true
                }
                // Its place taken by a new node of its kind (an editor's save: the old file
                // renamed to a backup name or replaced, the new one written; a new folder
                // renamed over an empty one): that node takes it over when it is due, and
                // this node is no delete. Planned now, the delete would go first whenever the
                // old node's change settled before the new one's.
                if try isTakenOver(s, successors: newHere()) { return false }
                let depth = try depth(of: s.node)
                var below: [(SyncedNode, Int)] = []
                if s.node.kind == .folder {
                    // A folder that left the workspace (moved into the Camera Roll, or to a
                    // temporary name) takes its contents with it; removed with `rm -r`, its
                    // contents are marked on their own and this finds them planned already.
                    // A node moved out of it before it went is still here: it goes up as a
                    // move, never as a delete, and before this folder's delete (the server
                    // refuses to delete a folder that still holds it). Until its move can be
                    // planned (not settled yet, or its new parent not sendable yet), the
                    // folder's delete waits.
                    for (child, depthBelow) in try descendants(of: s.node.id) where planned[child.ino] == nil {
                        if try isInWorkspace(child.ino) {
                            if let cd = bySeq[child.ino], try !plan(cd) || planned[child.ino] == nil {
                                nextDue = min(nextDue, 0.1)
                                return false
                            }
                            continue
                        }
                        below.append((child, depthBelow))
                    }
                }
                planned[d.ino] = Planned(ino: d.ino, seq: d.seq, change: .delete(id: s.node.id, base: s.node.version), base: s.node,
                                         depth: depth)
                order.append(d.ino)
                for (child, depthBelow) in below where planned[child.ino] == nil {
                    planned[child.ino] = Planned(ino: child.ino, seq: 0, change: .delete(id: child.node.id, base: child.node.version),
                                                 base: child.node, depth: depth + depthBelow)
                    order.append(child.ino)
                }
                return true
            }
            // The parent first: a new folder's children name its id. A folder whose id is
            // kept but not on the server yet (its put was refused, and waits) is no parent
            // to send to until it goes up in the same batch, first.
            var parentID = RemoteNode.rootID
            if local.parent != 1 {
                if let p = try known(local.parent), p.node.version > 0 || planned[local.parent] != nil {
                    parentID = p.node.id
                } else if let pd = bySeq[local.parent], try plan(pd), let p = try known(local.parent) {
                    parentID = p.node.id
                } else {
                    return false
                }
            }
            var synced = s
            if synced == nil { synced = try adoptReplaced(local, parentID: parentID, name: placement, planned: { planned[$0] != nil }) }
            var desired = RemoteNode(id: synced?.node.id ?? Self.newID(), parent: parentID, name: placement, kind: remoteKind(local.kind),
                                     hash: nil, size: 0, mtime: local.mtime, executable: false, target: nil)
            switch local.kind {
            case .file:
                desired.hash = local.content?.hex ?? Self.emptyContent
                desired.size = local.size
                desired.executable = local.permissions & 0o100 != 0
            case .symlink:
                desired.target = local.target.flatMap(MirrorRules.wireTarget)
                desired.size = Int64(local.target?.count ?? 0)
            case .folder:
                desired.mtime = 0   // a folder's time is its own business on each device
            case .special:
                return false
            }
            if let synced, synced.node.version > 0, synced.node.sameState(as: desired) {
                try write { try MirrorRows.clearDirty(d.ino, seq: d.seq, now: now, in: db) }
                return true
            }
            if synced == nil {
                // The id is kept before anything is sent: a create sent again after a kill is the same.
                var fresh = desired
                fresh.version = 0
                newNodes[d.ino] = SyncedNode(ino: d.ino, node: fresh)
            }
            // A new content goes with its block list; the server says which blocks it lacks
            // (or takes it at once: content it has, from any device or backup).
            var manifest: [String]?
            if local.kind == .file, local.size == 0, desired.hash != synced?.node.hash {
                // The empty content has no blocks to send, but a server that never recorded
                // it needs its (empty) list with the put, as for any content it lacks.
                manifest = []
            }
            if local.kind == .file, local.size > 0, desired.hash != synced?.node.hash || state.withLock({ $0.contentMissing.contains(d.ino) }) {
                let list = try drive.committedBlocks(d.ino)
                // Committed between the two reads: this pass sends nothing for it.
                guard ContentHash.of(blocks: list).hex == desired.hash else { nextDue = min(nextDue, 0.1); return false }
                manifest = list.map(\.hex)
            }
            let base = synced?.node.version ?? 0
            planned[d.ino] = Planned(ino: d.ino, seq: d.seq, change: .put(desired, base: base, blocks: manifest),
                                     base: base > 0 ? synced?.node : nil, depth: 0)
            order.append(d.ino)
            return true
        }

        // In slices of the dirty rows: each slice's changes go up before the next slice is
        // planned, so a big copy reaches the other devices as it goes, not after it all.
        // A folder delete plans its descendants with it, so they share its slice.
        var sent = 0
        for start in stride(from: 0, to: dirtyRows.count, by: Self.slice) {
            if stopping { break }
            let first = order.count
            for d in dirtyRows[start..<min(start + Self.slice, dirtyRows.count)] {
                if stopping { break }
                do { _ = try plan(d) } catch let gone as Errno where gone == .noSuchFileOrDirectory {
                    // The file changed while its content was read (a block of the version being
                    // sent went with a newer commit): the newer version is sent at the next pass.
                    nextDue = min(nextDue, 0.05)
                } catch {
                    noteFailure(d.ino, "could not prepare '\(( try? drive.path(of: d.ino)) ?? nil ?? "#\(d.ino)")': \(error)", retryIn: 5)
                }
            }
            let fresh = order[first...].compactMap { planned[$0] }
            if !newNodes.isEmpty {
                try write {
                    for n in newNodes.values {
                        try MirrorRows.save(n, in: db)
                        // A new folder's contents go up after it, in the next pass: those a
                        // copy into it marked, and those it brought from outside the workspace.
                        if n.node.kind == .folder { try MirrorRows.markUnsentBelow(n.ino, now: now, in: db) }
                    }
                }
                newNodes = [:]
            }
            if fresh.isEmpty { continue }
            sent += fresh.count
            do { try send(fresh, now: now, holding: holding) } catch let full as MirrorServerFull {
                state.withLock {
                    $0.status.serverFull = true
                    $0.status.lastProblem = full.description
                    $0.fullUntil = Date().timeIntervalSince1970 + 60
                }
                break
            }
        }
        if sent == 0 { return (nextDue.isFinite ? nextDue : 5, false) }
        state.withLock { if $0.fullUntil < clock { $0.status.serverFull = false } }
        return (0.05, true)
    }

    /// How many dirty rows a slice plans and sends at a time.
    static let slice = 500

    /// How often a pass asks again whether content held back may go (seconds).
    static let holdCheck = 10.0

    /// Sends planned changes and settles each answer. Deletes of files first (they free
    /// names), then puts parents first (the order they were planned in), then deletes of
    /// folders deepest first (their children went before). A put whose content the server
    /// lacks is answered `contentMissing`: the blocks it lacks go up, then that put again;
    /// while `holding`, they do not, and the put waits (`heldContent`) still marked.
    private func send(_ planned: [Planned], now: Int64, holding: String?) throws {
        let fileDeletes = planned.filter { if case .delete = $0.change { return $0.base?.kind != .folder }; return false }
        let puts = planned.filter { if case .put = $0.change { return true }; return false }
        let folderDeletes = planned.filter { if case .delete = $0.change { return $0.base?.kind == .folder }; return false }
            .sorted { $0.depth > $1.depth }
        let batch = fileDeletes + puts + folderDeletes
        for start in stride(from: 0, to: batch.count, by: 1000) {
            let slice = Array(batch[start..<min(start + 1000, batch.count)])
            if holding == nil { try sendAhead(slice) }
            var outcomes = try server.send(slice.map(\.change))
            var lacking: [Int] = []
            var uploads: [String: OutgoingContent] = [:]
            for (i, outcome) in outcomes.enumerated() {
                guard case .contentMissing(let missing) = outcome, case .put(let node, _, let blocks?) = slice[i].change,
                      let hash = node.hash else { continue }
                lacking.append(i)
                uploads[hash, default: OutgoingContent(content: hash, size: node.size, blocks: blocks, missing: [])].missing += missing
            }
            if !lacking.isEmpty, holding != nil {
                state.withLock { s in for i in lacking { s.heldContent[slice[i].ino] = now } }
            } else if !lacking.isEmpty {
                let unread = try server.sendContents(Array(uploads.values), open: openBlock, stop: stopAsked)
                var again: [Int] = []
                for i in lacking {
                    guard case .put(let node, _, _) = slice[i].change, let hash = node.hash, let why = unread[hash] else { again.append(i); continue }
                    try noteUnreadable(slice[i].ino, hash, why)
                }
                if !again.isEmpty {
                    let answers = try server.send(again.map { slice[$0].change })
                    for (k, i) in again.enumerated() { outcomes[i] = answers[k] }
                }
            }
            // Applied changes are recorded together, in order with the others' settling.
            var applied: [(Planned, RemoteNode)] = []
            for (p, outcome) in zip(slice, outcomes) {
                if case .applied(let node) = outcome { applied.append((p, node)); continue }
                try settleApplied(applied, now: now)
                applied = []
                // One answer that cannot be settled here (its conflict copy or the other
                // side's version cannot be put in place) waits on its own: the other
                // changes of the batch, and the passes that follow, go on.
                do { try settle(p, outcome, now: now) } catch let e as MirrorUnreachable { throw e } catch {
                    noteFailure(p.ino, "could not settle the workspace's answer for '\((try? drive.path(of: p.ino)) ?? nil ?? "#\(p.ino)")': \(error)", retryIn: 5)
                }
            }
            try settleApplied(applied, now: now)
        }
    }

    /// A new content of at most this size (256 KiB, one block) goes up before the change
    /// that names it, when the workspace does not have the content. Sent the other way
    /// round, a copy of many small files sent every change twice: first refused for its
    /// missing block, then again after the block went, each time checked by the server.
    /// A content the workspace lacks almost never has its only block stored (another
    /// file's version would have to end in the same bytes), so little is sent for nothing,
    /// and never more than this. A larger or longer content asks first: an edited large
    /// file shares most blocks with its last version, and the refusal names the few the
    /// server lacks.
    static let sentAheadBytes: Int64 = 256 << 10

    /// Sends the blocks of the slice's small new contents that the workspace lacks (one
    /// question for the slice's contents, then their blocks in packs). A block that cannot
    /// be read now, or a pack the quota refuses, is left to the change's refusal, which
    /// asks again.
    private func sendAhead(_ slice: [Planned]) throws {
        var small: [String: OutgoingContent] = [:]
        for p in slice {
            guard case .put(let node, _, let blocks?) = p.change, node.kind == .file, let hash = node.hash,
                  node.size > 0, node.size <= Self.sentAheadBytes else { continue }
            small[hash] = OutgoingContent(content: hash, size: node.size, blocks: blocks, missing: [])
        }
        if small.isEmpty { return }
        let present = try server.presentContents(Array(small.keys))
        let absent = small.values.filter { !present.contains($0.content) }
        if absent.isEmpty { return }
        do { _ = try server.sendContents(absent, open: openBlock, stop: stopAsked) } catch is MirrorServerFull {
            // Over its quota, the workspace still takes the slice's changes that need no
            // bytes: they go next, and the refused puts' blocks meet the quota again.
        }
    }

    /// A block of this drive's store, to send.
    private func openBlock(_ hex: String) throws -> StoredBlock {
        guard let digest = SHA256Digest(hex: hex) else { throw Errno.invalidArgument }
        return try blocks.read(digest)
    }

    /// A content whose block could not be read here. Changed since (the block went with
    /// a newer commit): that one goes next pass. Still this content: its block is lost
    /// from the drive's store, a failure to report, never a delete or an empty version;
    /// the server keeps the last synced version.
    private func noteUnreadable(_ ino: UInt64, _ hash: String, _ why: String) throws {
        guard try drive.committedEntry(ino)?.content?.hex == hash else { return }
        let path = (try? drive.path(of: ino)) ?? nil ?? "#\(ino)"
        noteFailure(ino, "could not send '\(path)': a block of its content could not be read from this drive's store (\(why)); the workspace keeps its last synced version (run 'vdrive check')", retryIn: 60)
    }

    /// The wire name of an entry in the workspace, nil when it is not in it: in the Camera
    /// Roll, a special file, a name the server cannot take, a temporary name.
    /// `isKnown`: a folder the mirror knows of that is not in its tables yet.
    func place(_ e: DriveEntry, isKnown: (UInt64) -> Bool = { _ in false }) throws -> String? {
        if e.kind == .special { return nil }
        if e.kind == .symlink, MirrorRules.wireTarget(e.target ?? []) == nil { return nil }
        guard let name = MirrorRules.wireName(e.name), !MirrorRules.isTemporary(name, patterns: settings.excluded) else { return nil }
        if try leftOutByUser(name, e.ino, on: db) { return nil }
        if e.parent == 1 { return name == MirrorRules.cameraRoll ? nil : name }
        // Inside a folder the mirror knows: in the workspace. Else walk up (a new folder).
        if isKnown(e.parent) { return name }
        if try MirrorRows.synced(ino: e.parent, in: db) != nil { return name }
        guard let parent = try drive.committedEntry(e.parent), try place(parent, isKnown: isKnown) != nil else { return nil }
        return name
    }

    /// An editor's save: a new file renamed over the old name (or the old one renamed
    /// away to a backup name); a new folder renamed over an empty one. The new inode takes
    /// over the node that had that place, so the node keeps its id and its versions
    /// instead of a delete and a create. Never a node whose own change this pass planned
    /// (`planned`): one node would go up twice, as a delete and as a put.
    private func adoptReplaced(_ local: DriveEntry, parentID: String, name: String, planned: (UInt64) -> Bool) throws -> SyncedNode? {
        guard let old = try db.queryOne("SELECT ino, \(MirrorRows.nodeColumns) FROM mirror_nodes WHERE parent = ? AND name = ? AND ino != ? AND version > 0",
                                        parentID, name, local.ino, row: { SyncedNode(ino: UInt64($0.int64(0)), node: MirrorRows.node($0, from: 1)) })
        else { return nil }
        guard old.node.kind == remoteKind(local.kind), !planned(old.ino), try mayBeTakenOver(old) else { return nil }
        if let there = try drive.committedEntry(old.ino), try place(there) != nil { return nil }   // it moved elsewhere in the workspace
        let adopted = SyncedNode(ino: local.ino, node: old.node)
        try write {
            try MirrorRows.forget(ino: old.ino, in: db)
            try db.run("DELETE FROM mirror_dirty WHERE ino = ?", old.ino)
            try MirrorRows.save(adopted, in: db)
            // A folder made under a temporary name brings contents never sent: they go up
            // into the node it takes over, as into a new folder.
            if local.kind == .folder { try MirrorRows.markUnsentBelow(local.ino, now: MirrorClock.nanoseconds(), in: db) }
        }
        return adopted
    }

    /// Whether a synced node gone from its place here has a successor there that
    /// `adoptReplaced` will give it to: an inode of its kind the mirror has no row of (not
    /// planned yet: one of `successors`, the dirty such inodes), at the same name in the
    /// same folder.
    private func isTakenOver(_ gone: SyncedNode, successors: Set<UInt64>) throws -> Bool {
        if successors.isEmpty { return false }
        let folder: UInt64
        if gone.node.parent == RemoteNode.rootID {
            folder = 1
        } else if let parent = try MirrorRows.synced(node: gone.node.parent, in: db) {
            folder = parent.ino
        } else {
            return false
        }
        guard let ino = try drive.committedIno(named: Array(gone.node.name.utf8), in: folder), successors.contains(ino),
              let there = try drive.committedEntry(ino), remoteKind(there.kind) == gone.node.kind,
              try mayBeTakenOver(gone) else { return false }
        return try place(there) != nil
    }

    /// Whether a synced node no longer in its place here may pass its id to a new node
    /// there. A folder only when its inode is gone (removed, or replaced by a rename: it
    /// was empty then); one that left the workspace took its contents along, and those
    /// must go from the workspace as its delete takes them, not stay in the server's
    /// folder under a new inode that does not hold them.
    private func mayBeTakenOver(_ old: SyncedNode) throws -> Bool {
        if old.node.kind != .folder { return true }
        return try drive.committedEntry(old.ino) == nil
    }

    /// Whether inode `ino` is still in the workspace here: every folder up to the root
    /// committed, none a temporary name, and not under the Camera Roll. Unlike `place`,
    /// a synced parent row does not vouch for it (that parent may have left itself).
    /// `connection`: the mirror's tables on the caller's thread (the worker's by default).
    func isInWorkspace(_ ino: UInt64, on connection: Database? = nil) throws -> Bool {
        var current = ino
        for _ in 0..<4096 {
            guard let e = try drive.committedEntry(current), e.kind != .special,
                  e.kind != .symlink || MirrorRules.wireTarget(e.target ?? []) != nil,
                  let name = MirrorRules.wireName(e.name), !MirrorRules.isTemporary(name, patterns: settings.excluded),
                  try !leftOutByUser(name, e.ino, on: connection ?? db) else { return false }
            if e.parent == 1 { return name != MirrorRules.cameraRoll }
            current = e.parent
        }
        return false
    }

    /// Whether one of the user's patterns keeps `name` back: only while its inode was never
    /// synced. A node already synced keeps syncing, so a pattern added later deletes
    /// nothing on the other devices, and what they send of it is never undone here.
    func leftOutByUser(_ name: String, _ ino: UInt64, on connection: Database) throws -> Bool {
        guard !settings.userExcluded.isEmpty, MirrorRules.isTemporary(name, patterns: settings.userExcluded) else { return false }
        return (try MirrorRows.synced(ino: ino, in: connection)?.node.version ?? 0) == 0
    }

    /// Whether the mirror leaves inode `ino` out of the workspace: `isInWorkspace` for a
    /// reader beside the mount (a file's `user.vdrive.sync`). An inode it cannot read
    /// (gone meanwhile) is not said to be excluded.
    public func isExcluded(_ ino: UInt64) -> Bool {
        guard let inWorkspace = try? onStatusConnection({ try isInWorkspace(ino, on: $0) }) else { return false }
        return !inWorkspace && ((try? drive.committedEntry(ino)) ?? nil) != nil
    }

    /// Every synced node under folder `id`, with how far below it each is.
    func descendants(of id: String) throws -> [(SyncedNode, Int)] {
        try db.query("""
            WITH RECURSIVE below(node, depth) AS (
                SELECT node, 1 FROM mirror_nodes WHERE parent = ?
                UNION ALL SELECT m.node, b.depth + 1 FROM mirror_nodes m JOIN below b ON m.parent = b.node WHERE b.depth < 4096)
            SELECT m.ino, \(MirrorRows.nodeColumns.split(separator: ",").map { "m." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ")), b.depth
            FROM below b JOIN mirror_nodes m ON m.node = b.node WHERE m.version > 0
            """, id) { (SyncedNode(ino: UInt64($0.int64(0)), node: MirrorRows.node($0, from: 1)), Int($0.int64(11))) }
    }

    func depth(of node: RemoteNode) throws -> Int {
        var depth = 0
        var parent = node.parent
        while parent != RemoteNode.rootID, depth < 4096, let p = try MirrorRows.synced(node: parent, in: db) {
            depth += 1
            parent = p.node.parent
        }
        return depth
    }

    func remoteKind(_ k: DriveEntry.Kind) -> RemoteNode.Kind {
        switch k {
        case .folder: return .folder
        case .symlink: return .symlink
        default: return .file
        }
    }

    /// 128 random bits in hex (a node's id). Two words from the system's generator, not
    /// sixteen `random(in:)` calls and `String(format:)`: it ran once per new file of a copy.
    static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        let words = [generator.next(), generator.next()] as [UInt64]
        return words.map { word in
            let hex = String(word, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }

    func noteFailure(_ ino: UInt64, _ text: String, retryIn seconds: Double = 60) {
        MirrorLog.error(text)
        state.withLock {
            $0.status.lastProblem = text
            $0.retryAfter[ino] = (Date().timeIntervalSince1970 + seconds, MirrorClock.nanoseconds(), text)
        }
    }
}
