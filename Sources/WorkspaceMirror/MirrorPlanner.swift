/// The decisions of the mirror, as pure functions of three states of one node
/// (Docs/sync.md, "Conflicts"): *base*, what this device and the server last agreed on;
/// *ours*, the state here now; *theirs*, the server's current state. The engine reads
/// the states from its tables and the catalog and carries the decisions out; these
/// functions touch nothing, so each rule is tested alone.
public enum MirrorPlanner {
    /// What to do when the server refused our put because its base is not current.
    public enum PutResolution: Equatable, Sendable {
        /// Apply `local` here (the parts of theirs we take), then send `send` on `theirs.version`.
        case merge(local: RemoteNode, send: RemoteNode)
        /// Both changed the content: ours becomes a conflict copy (a new node beside it),
        /// theirs keeps the node and its name.
        case conflictCopy
    }

    /// Our put met `theirs`, which changed since `base`.
    public static func resolvePut(ours: RemoteNode, base: RemoteNode, theirs: RemoteNode) -> PutResolution {
        if theirs.deleted {
            // Edit (or rename) against delete: ours wins, and the node comes back.
            return .merge(local: ours, send: ours)
        }
        let weChangedContent = ours.hash != base.hash || ours.size != base.size || ours.target != base.target
        let theyChangedContent = theirs.hash != base.hash || theirs.size != base.size || theirs.target != base.target
        if weChangedContent && theyChangedContent && (ours.hash != theirs.hash || ours.target != theirs.target) {
            return .conflictCopy
        }
        var merged = theirs
        // Location: ours when only we moved it; when both did, the first to reach the
        // server (theirs) wins and ours follows it: nothing is duplicated.
        let weMoved = ours.parent != base.parent || ours.name != base.name
        let theyMoved = theirs.parent != base.parent || theirs.name != base.name
        if weMoved && !theyMoved { merged.parent = ours.parent; merged.name = ours.name }
        if weChangedContent {
            merged.hash = ours.hash; merged.size = ours.size; merged.target = ours.target; merged.mtime = ours.mtime
        } else if ours.mtime != base.mtime && theirs.mtime == base.mtime {
            merged.mtime = ours.mtime
        }
        if ours.executable != base.executable && theirs.executable == base.executable { merged.executable = ours.executable }
        merged.deleted = false
        return .merge(local: merged, send: merged)
    }

    /// What to do when the server refused our delete because its base is not current.
    public enum DeleteResolution: Equatable, Sendable {
        /// It is deleted there too: forget it.
        case done
        /// They changed its content (or target): the edit wins, the node comes back here.
        case restore
        /// They only moved it or changed its attributes: delete it again, on their version.
        case deleteAgain
    }

    public static func resolveDelete(base: RemoteNode, theirs: RemoteNode) -> DeleteResolution {
        if theirs.deleted { return .done }
        if theirs.hash != base.hash || theirs.target != base.target || theirs.size != base.size { return .restore }
        return .deleteAgain
    }

    /// How a node made here meets a node of the server with the same name in the same
    /// folder: folders of the same name become one (their contents are both kept);
    /// anything else keeps both, ours under a conflict name.
    public enum NameClash: Equatable, Sendable { case mergeFolders, renameOurs }

    public static func clash(oursKind: RemoteNode.Kind, theirsKind: RemoteNode.Kind) -> NameClash {
        oursKind == .folder && theirsKind == .folder ? .mergeFolders : .renameOurs
    }

    /// When a dirty inode is due to be sent: quiet for `quiet` since its last change, or
    /// waiting `most` since it became dirty (a file rewritten all the time is still sent,
    /// about once per `most`).
    public static func isDue(changed: Int64, since: Int64, now: Int64, quiet: Int64, most: Int64) -> Bool {
        now - changed >= quiet || now - since >= most
    }
}
