import Foundation
import Backup
import WorkspaceMirror

/// The workspace mirror's status line as the running mount last saw it, kept in the
/// state folder (`workspace-status`) for `vdrive status`, another process: the catalog
/// tells what waits to go up and to come down, but not what only the mount knows (the
/// server unreachable, conflict copies made, sends that failed and why). Written when
/// the line changes (twice a second at most during a large copy, never while
/// idle), without an fsync: it is rewritten at each change and removed at unmount, so
/// one found while no mount holds the state folder is a killed mount's, and not read.
public struct WorkspaceStatusFile: Sendable {
    public let path: String

    public init(stateFolder: String) { path = stateFolder + "/workspace-status" }

    func write(_ status: MirrorStatus) {
        // A status line that cannot be written (a full disk) is not worth failing the
        // mirror for: `vdrive status` then says what the catalog says.
        try? AtomicFile.write(Data((status.line + "\n").utf8), to: path, durable: false)
    }

    func remove() { unlink(path) }

    /// The line the running mount of this state folder last wrote; nil when no mount
    /// holds the folder (or it has not written one yet).
    public func read() -> String? {
        guard StateFolder.isHeld((path as NSString).deletingLastPathComponent),
              let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return line.isEmpty ? nil : line
    }
}
