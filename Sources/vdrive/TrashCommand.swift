import Foundation
import DeviceWiring
import enum Backup.ByteCountText
import Client
import HTTPClient
import Protocol

/// `vdrive trash list | restore`: the synced workspace's trash, kept by the server
/// (Docs/sync.md, "Trash, versions, pins"). A restore is the server's: the nodes come
/// back with a new version each and every device's mirror brings them down.
enum TrashCommand {
    static var verb: Verb { Verb(name: "trash", summary: "list or restore what was deleted from the synced workspace", help: help, run: run) }

    static let help = """
    Usage: vdrive trash list [FOLDER] [--json]
           vdrive trash restore PATH
           vdrive trash restore --under FOLDER [--since TIME]
                  [--state DIR] [--server URL --token-file FILE] [--ca-file FILE] [--allow-insecure-http]

    list [FOLDER]
              what was deleted from the workspace, newest first: its path when it was
              deleted, kind, size, the device that deleted it and when; with FOLDER
              (a workspace folder such as Docs, or a folder on the mounted drive), only
              what was deleted in it or below. --json prints one JSON array (id, path,
              kind, size, deletedBy, deletedAt in seconds).
    restore PATH
              brings back the newest deleted node at PATH (a workspace path such as
              Docs/note.txt, or its path on the mounted drive). A folder comes back with
              what was deleted in it together with it (by the same device, in the minute
              before). If the name is taken meanwhile, it comes back as
              'name (restored)'.
    restore --under FOLDER [--since TIME]
              brings back everything deleted under FOLDER ("/" for the whole workspace),
              or only what was deleted at or after TIME: 2026-01-02, "2026-01-02 10:00",
              2h, 3d (that long ago), @SECONDS.

    Restored nodes appear on every device as its mirror follows the server. The
    server keeps deleted nodes for its --trash-days (default 30).
    The server is --server with --token-file, else the one the drive syncs with (the
    drive PATH or FOLDER is on, or the current folder for a list, or --state DIR's: its
    last mount noted it there), else
    $XDG_CONFIG_HOME/vdrive/remote.json. --state names the drive's state folder (to
    find a live FOLDER's node; default: that of the mounted drive FOLDER is on).
    \(RemoteConfig.help)

    Exit codes: 0 done, 64 usage, 66 nothing in the trash at PATH (or FOLDER unknown),
    69 or 75 the server could not be reached, 77 the token was refused, 78 no server
    configured.
    """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: RemoteConfig.valued.union(["--under", "--since", "--state"]),
                                  flags: RemoteConfig.flags.union(["--json"]))
        guard let action = options.positionals.first else { throw CLIError.usage("trash needs 'list' or 'restore'; see --help") }
        switch action {
        case "list":
            guard options.positionals.count <= 2 else { throw CLIError.usage("trash list takes at most one FOLDER; see --help") }
            let folder = options.positionals.count == 2 ? WorkspacePath(options.positionals[1]) : nil
            // The server: the one of the drive FOLDER is on, else the current folder's.
            let state = options.value("--state").map(Paths.absolute) ?? folder?.mountedState
                ?? WorkspacePath.currentDriveState
            return try list(client(options, stateFolder: state), under: folder?.path ?? "", json: options.has("--json"))
        case "restore":
            let wanted = options.value("--under") == nil ? 2 : 1
            guard options.positionals.count == wanted else {
                throw CLIError.usage(wanted == 1 ? "give either PATH or --under FOLDER, not both" : "trash restore needs one PATH (or --under FOLDER); see --help")
            }
            if let folder = options.value("--under").map(WorkspacePath.init) {
                let state = folder.stateFolder(options)
                let since = try options.value("--since").map { text -> Int64 in
                    guard let t = TimeText.parse(text) else {
                        throw CLIError.usage("--since takes a time: 2026-01-02, \"2026-01-02 10:00\", 2h, 3d or @SECONDS; got '\(text)'")
                    }
                    return t
                } ?? 0
                return try restoreUnder(client(options, stateFolder: state), folder, since: since, stateFolder: state)
            }
            if options.value("--since") != nil { throw CLIError.usage("--since goes with --under FOLDER") }
            let path = WorkspacePath(options.positionals[1])
            return try restore(client(options, stateFolder: path.stateFolder(options)), path)
        default:
            throw CLIError.usage("unknown trash action '\(action)': use 'list' or 'restore'")
        }
    }

    /// The server of the options, else the one the drive in `stateFolder` syncs with, else
    /// this user's (remote.json).
    static func client(_ options: Options, stateFolder: String?) throws -> (WorkspaceClient, String) {
        guard let remote = try RemoteConfig.load(options, stateFolder: stateFolder) else {
            throw CLIError("no workspace server is configured; run ./mount once, or pass --server URL --token-file FILE", code: ExitCode.config)
        }
        return (try remote.client(), remote.url)
    }

    /// Every entry of the trash, newest deletion first.
    static func entries(_ c: (WorkspaceClient, String)) throws -> [TrashEntry] {
        var out: [TrashEntry] = []
        var after: Int64?
        repeat {
            let page: TrashPage
            do { page = try c.0.trash(after: after) } catch { throw serverError(error, c.1, doing: "read the trash") }
            out += page.trash
            after = page.next
        } while after != nil
        return out
    }

    /// `under`: a workspace folder ("" for all): what was deleted in it or below.
    static func list(_ c: (WorkspaceClient, String), under: String, json: Bool) throws -> Int32 {
        let all = try entries(c).filter {
            let path = WorkspacePath.normalized($0.path)
            return under.isEmpty || path == under || path.hasPrefix(under + "/")
        }
        if json {
            struct Item: Encodable { var id, path, kind: String; var size: Int64?; var deletedBy: String?; var deletedAt: Int64? }
            let items = all.map { Item(id: $0.node.id, path: WorkspacePath.normalized($0.path), kind: $0.node.kind.rawValue,
                                       size: $0.node.size, deletedBy: $0.node.deletedBy, deletedAt: $0.node.deletedAt) }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(items), as: UTF8.self))
            return ExitCode.ok
        }
        if all.isEmpty {
            print(under.isEmpty ? "The trash is empty." : "Nothing deleted in '\(under)' is in the trash.")
            return ExitCode.ok
        }
        print("DELETED".padding(21) + "BY".padding(14) + "KIND".padding(8) + "SIZE".padding(10) + "PATH")
        for e in all {
            let size = e.node.kind == .file ? ByteCountText.format(e.node.size ?? 0) : "-"
            print(TimeText.show(e.node.deletedAt ?? e.node.changedAt).padding(21) + (e.node.deletedBy ?? "?").padding(14)
                  + e.node.kind.rawValue.padding(8) + size.padding(10) + WorkspacePath.normalized(e.path))
        }
        return ExitCode.ok
    }

    /// A folder deleted with its contents: the contents went first (the mirror deletes
    /// a folder's children before it), within this many seconds.
    static let sameDeletionSeconds: Int64 = 60

    static func restore(_ c: (WorkspaceClient, String), _ path: WorkspacePath) throws -> Int32 {
        let all = try entries(c)
        guard let entry = all.first(where: { WorkspacePath.normalized($0.path) == path.path }) else {
            throw CLIError("nothing deleted at '\(path.path)' is in the trash; 'vdrive trash list' shows what can be restored "
                           + "(a path as it was when deleted; deleted nodes are kept for the server's --trash-days)", code: ExitCode.noInput)
        }
        var ids = [entry.node.id]
        if entry.node.kind == .folder, let at = entry.node.deletedAt {
            let prefix = path.path + "/"
            ids += all.filter {
                WorkspacePath.normalized($0.path).hasPrefix(prefix) && $0.node.deletedBy == entry.node.deletedBy
                    && ($0.node.deletedAt ?? 0) >= at - sameDeletionSeconds && ($0.node.deletedAt ?? 0) <= at
            }.map(\.node.id)
        }
        var restored: [TreeNode] = []
        var skipped: [RestoreSkip] = []
        var start = 0
        while start < ids.count {
            let batch = Array(ids[start..<min(ids.count, start + API.maxTreeRestore)])
            do {
                let reply = try c.0.restore(ids: batch)
                restored += reply.nodes
                skipped += reply.skipped
            } catch { throw serverError(error, c.1, doing: "restore '\(path.path)'") }
            start += batch.count
        }
        return report(restored, skipped, named: path.path, entry: entry)
    }

    static func restoreUnder(_ c: (WorkspaceClient, String), _ folder: WorkspacePath, since: Int64, stateFolder: String) throws -> Int32 {
        let id: String
        if folder.path.isEmpty {
            id = TreeNode.rootID
        } else if let live = try? CatalogNode.find(folder, stateFolder: stateFolder) {
            id = live.id
        } else if let deleted = try entries(c).first(where: { WorkspacePath.normalized($0.path) == folder.path && $0.node.kind == .folder }) {
            id = deleted.node.id
        } else {
            throw CLIError("no folder '\(folder.path)' in the drive's workspace (\(stateFolder)) or in the trash; give a workspace folder, '/' for all, or --state DIR of the drive",
                           code: ExitCode.noInput)
        }
        let reply: TreeRestoreResponse
        do { reply = try c.0.restore(under: id, since: since) } catch {
            if case .notFound = error {
                throw CLIError("the server does not know the folder '\(folder.path)' (purged?); see 'vdrive trash list'", code: ExitCode.noInput)
            }
            throw serverError(error, c.1, doing: "restore under '\(folder.path)'")
        }
        if reply.nodes.isEmpty && reply.skipped.isEmpty {
            print("Nothing deleted under '\(folder.path.isEmpty ? "/" : folder.path)'" + (since > 0 ? " since \(TimeText.show(since))" : "") + " is in the trash.")
            return ExitCode.ok
        }
        return report(reply.nodes, reply.skipped, named: folder.path.isEmpty ? "/" : folder.path, entry: nil)
    }

    static func report(_ restored: [TreeNode], _ skipped: [RestoreSkip], named: String, entry: TrashEntry?) -> Int32 {
        if let entry, let node = restored.first(where: { $0.id == entry.node.id }), node.name != entry.node.name {
            print("Restored '\(named)' as '\(node.name)' (the name was taken).")
        }
        print("Restored \(restored.count) node(s) from the trash (\(named)); every device gets them as its mirror follows the server.")
        for s in skipped { printError("not restored: node \(s.id): \(s.error): \(s.message)") }
        return skipped.isEmpty || !restored.isEmpty ? ExitCode.ok : ExitCode.noInput
    }

    static func serverError(_ error: ClientError, _ server: String, doing what: String) -> CLIError {
        switch error {
        case .insecure(let m): return CLIError(m, code: ExitCode.config)
        case .http(401, _): return CLIError("the server \(server) refused this device's token (revoked?); make a new one with 'vdrive serve device add NAME'", code: ExitCode.noPermission)
        default: return CLIError("cannot \(what) on \(server): \(error)", code: error.isTransient ? ExitCode.tempFail : ExitCode.unavailable)
        }
    }
}
