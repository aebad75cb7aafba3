import Foundation
import DeviceWiring
import Storage
import WorkspaceMirror

/// A workspace path the user named on the command line: a path on a mounted drive
/// (absolute, or relative to the current folder), or a path inside the workspace
/// (`Docs/note.txt`, `/Docs/note.txt`) when it is not on a mounted drive.
struct WorkspacePath {
    /// The path inside the workspace, no leading `/` ("" is the root).
    let path: String
    /// The mounted drive it was found on, when it was given as a path there.
    let mountPoint: String?
    /// That drive's state folder (its mount's source), when the mount names one.
    let mountedState: String?

    init(_ text: String) {
        let absolute = (Paths.absolute(text) as NSString).standardizingPath
        if let mount = Self.mounts().filter({ absolute == $0.point || absolute.hasPrefix($0.point == "/" ? "/" : $0.point + "/") })
            .max(by: { $0.point.count < $1.point.count }) {
            mountPoint = mount.point
            mountedState = mount.source.hasPrefix("/") ? mount.source : nil
            path = String(absolute.dropFirst(mount.point.count)).trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        } else {
            mountPoint = nil
            mountedState = nil
            path = Self.normalized(text)
        }
    }

    /// The state folder of the mounted drive the current folder is on, if any: the drive
    /// a command run inside a mount is about when it is given none.
    static var currentDriveState: String? { WorkspacePath(FileManager.default.currentDirectoryPath).mountedState }

    /// The state folder of the drive to read for this path: `--state`, else that of the
    /// mounted drive the path is on, else the default one.
    func stateFolder(_ options: Options) -> String {
        options.value("--state").map(Paths.absolute) ?? mountedState ?? BackupPaths.stateFolder
    }

    /// `a//b/./c/` → `a/b/c`: the form the server's trash paths and the catalog use.
    static func normalized(_ text: String) -> String {
        text.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }.joined(separator: "/")
    }

    var components: [String] { path.split(separator: "/").map(String.init) }

    /// Where it is on the mounted drive (given there), else nil.
    var mountedPath: String? { mountPoint.map { path.isEmpty ? $0 : $0 + "/" + path } }

    /// Mounted drives (`fuse.vdrive` in /proc/self/mountinfo): each mount point and its
    /// source (the drive's state folder; `vdrive` for a mount that names none).
    static func mounts() -> [(point: String, source: String)] {
        let info = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        return info.split(separator: "\n").compactMap { line -> (point: String, source: String)? in
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard let dash = fields.firstIndex(of: "-"), dash + 2 < fields.count, fields[dash + 1] == "fuse.vdrive", fields.count > 4 else { return nil }
            return (unescape(String(fields[4])), unescape(String(fields[dash + 2])))
        }
    }

    /// mountinfo writes space, tab, newline and backslash as `\040`-style octal.
    static func unescape(_ field: String) -> String {
        var bytes: [UInt8] = []
        let raw = Array(field.utf8)
        var i = 0
        while i < raw.count {
            if raw[i] == UInt8(ascii: "\\"), i + 4 <= raw.count,
               let value = UInt8(String(decoding: raw[(i + 1)..<(i + 4)], as: UTF8.self), radix: 8) {
                bytes.append(value)
                i += 4
            } else {
                bytes.append(raw[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A workspace node as this device last synced it, read from the catalog of a state
/// folder on a read-only connection (a running mount keeps writing it: WAL lets both).
struct CatalogNode {
    let ino: UInt64
    let id: String
    let parent: String
    let name: String
    let kind: String
    let hash: String?
    let size: Int64
    let executable: Bool
    /// The server's version this device last agreed on (0: not acknowledged yet).
    let version: Int64
    /// A change of it made here waits to go up.
    let changedHere: Bool

    /// The node at `path` in the catalog of `stateFolder`. Throws a `CLIError` naming
    /// what is missing: the catalog (66), the path (66), its synced row (75: not sent yet).
    static func find(_ path: WorkspacePath, stateFolder: String) throws -> CatalogNode {
        let catalogPath = stateFolder + "/catalog.sqlite"
        guard FileManager.default.fileExists(atPath: catalogPath),
              let db = try? Database(path: catalogPath, options: .init(readOnly: true, create: false)) else {
            throw CLIError("no drive catalog in \(stateFolder); give the state folder of the mounted drive with --state DIR", code: ExitCode.noInput)
        }
        var ino: UInt64 = 1
        for name in path.components {
            guard let child = try db.queryOne("SELECT ino FROM entries WHERE parent = ? AND name = ?", ino, Array(name.utf8),
                                              row: { UInt64($0.int64(0)) }) else {
                throw CLIError("'\(path.path)' is not in the drive's workspace (\(stateFolder)); check the path (a deleted file: 'vdrive trash list')",
                               code: ExitCode.noInput)
            }
            ino = child
        }
        let row = (try? SyncedNode.stored(ino: ino, in: db)).flatMap { $0 }.map { stored -> CatalogNode in
            let n = stored.synced.node
            return CatalogNode(ino: ino, id: n.id, parent: n.parent, name: n.name, kind: n.kind.rawValue, hash: n.hash, size: n.size,
                               executable: n.executable, version: n.version, changedHere: stored.changedHere)
        }
        guard let node = row, node.version > 0 else {
            throw CLIError("'\(path.path)' is not on the workspace server yet (it is sent once the drive is mounted with a server); try again in a moment ('vdrive status' shows what waits)",
                           code: ExitCode.tempFail)
        }
        return node
    }
}
