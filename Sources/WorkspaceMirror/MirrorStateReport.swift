import Storage

extension MirrorStatus {
    /// One line for the status file and `vdrive status`: never "up to date" while
    /// something waits or failed, or while the server's side is not known (not reached
    /// yet, or not reachable now): then "nothing to send".
    public var line: String {
        var parts: [String] = []
        if waitingUp == 0 && waitingDown == 0 && failures == 0 && !serverFull && passFailure == nil {
            parts.append(offline || connecting ? "Workspace: nothing to send" : "Workspace: up to date")
        } else {
            var waits: [String] = []
            if waitingUp > 0 { waits.append("\(waitingUp) change\(waitingUp == 1 ? "" : "s") to send") }
            if waitingDown > 0 { waits.append("\(waitingDown) to apply") }
            parts.append("Workspace: " + (waits.isEmpty ? "not everything is in sync" : waits.joined(separator: ", ")))
        }
        if conflicts > 0 { parts.append("\(conflicts) conflict cop\(conflicts == 1 ? "y" : "ies") made") }
        if serverFull { parts.append("waiting: the workspace server is full (its quota is reached); free space on it") }
        else if offline { parts.append("waiting for the workspace server") }
        else if connecting { parts.append("connecting to the workspace server") }
        else if let passFailure { parts.append("failing: " + passFailure) }
        else if let held, waitingUp > 0 { parts.append(held) }
        if failures > 0 { parts.append("\(failures) failed" + (lastProblem.map { ": \($0)" } ?? "")) }
        return parts.joined(separator: " · ")
    }

    /// What the catalog says without a running mirror (`vdrive status` from another process).
    /// `failing`: inodes whose last send failed; those still waiting to go are the failures
    /// (one sent since, or removed here, is not one any more).
    public static func stored(in db: Database, failing: [UInt64] = []) throws -> MirrorStatus {
        var s = MirrorStatus()
        s.waitingUp = try db.queryOne("SELECT count(*) FROM mirror_dirty") { Int($0.int64(0)) } ?? 0
        s.waitingDown = try db.queryOne("SELECT count(*) FROM mirror_remote") { Int($0.int64(0)) } ?? 0
        s.failures = try failing.filter { try MirrorRows.isDirty($0, in: db) }.count
        return s
    }
}

/// The `user.vdrive.sync` attribute of a file: where its mirror stands.
public enum MirrorFileState: String, Sendable {
    case synced, pending, uploading, onlineOnly = "online-only", conflict, excluded, failed

    /// From the catalog (any connection): `name` is the file's name, `excluded` what the
    /// rules say of its place, `hasWriters` whether a writable handle is open on it: its
    /// writes reach the catalog at a close, a sync or another handle's release, and it is
    /// sent once the last writer closes, so until then it is `pending`, never `synced`.
    /// `failure`: why its last send failed (`MirrorEngine.failure(of:)`); while the change
    /// still waits to go, the file is `failed`.
    public static func of(ino: UInt64, name: String, excluded: Bool, hasWriters: Bool = false, failure: String? = nil,
                          in db: Database) throws -> MirrorFileState {
        if excluded { return .excluded }
        if hasWriters { return .pending }
        if try db.queryOne("SELECT 1 FROM mirror_dirty WHERE ino = ?", ino, row: { _ in true }) ?? false {
            return failure == nil ? .pending : .failed
        }
        guard let version = try db.queryOne("SELECT version FROM mirror_nodes WHERE ino = ?", ino, row: { $0.int64(0) }) else { return .pending }
        if version == 0 { return .uploading }
        if name.contains(" (conflict from ") { return .conflict }
        let online = try db.queryOne("""
            SELECT 1 FROM file_blocks f JOIN blocks b ON b.hash = f.hash WHERE f.ino = ? AND b.resident = 0 LIMIT 1
            """, ino, row: { _ in true }) ?? false
        return online ? .onlineOnly : .synced
    }
}
