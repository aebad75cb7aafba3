import Foundation
import DeviceWiring
import enum Backup.ByteCountText
import Client
import Protocol

/// `vdrive versions PATH [--restore N]`: the contents a synced workspace file has had,
/// kept by the server, and making an old one current again.
///
/// The node is found in the drive's catalog (its id in the mirror's synced tree, on a
/// read-only connection, so it works beside a running mount), then everything goes
/// through the server: a restore is a put of the old content's hash based on the
/// version this device last synced, a new version every device's mirror then applies.
/// A node changed meanwhile (elsewhere, or here and not sent yet) is a conflict, said
/// as such: nothing is overwritten.
enum VersionsCommand {
    static var verb: Verb { Verb(name: "versions", summary: "list a synced file's versions, or make an old one current", help: help, run: run) }

    static let help = """
    Usage: vdrive versions PATH [--json] [--state DIR]
           vdrive versions PATH --restore N [--state DIR]
                  [--server URL --token-file FILE] [--ca-file FILE] [--allow-insecure-http]

    PATH is a file of the synced workspace: its path on the mounted drive, or its
    path in the workspace (Docs/note.txt). Its versions are listed oldest first:
    number, when, the device that made it, size and content hash; the current one
    is marked. --json prints one JSON array.

    --restore N makes version N current again: a new version with version N's
    content (nothing is uploaded: the server has it), which every device's mirror
    applies. The history stays. If the file changed since this drive last synced it
    (on another device, or here and not sent yet), nothing is done and it says so:
    run the command again once the drive has synced ('vdrive status').

    --state names the drive's state folder (default: that of the mounted drive PATH
    is on, else $XDG_DATA_HOME/vdrive/drive). The server is --server with --token-file,
    else the one that drive syncs with (its last mount noted it in the state folder),
    else $XDG_CONFIG_HOME/vdrive/remote.json.
    \(RemoteConfig.help)

    Exit codes: 0 done, 64 usage (no version N), 65 the server refused the change,
    66 PATH is not in the workspace, 69 or 75 the server could not be reached, or the
    file changed meanwhile (75: run again), 77 the token was refused, 78 no server.
    """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: RemoteConfig.valued.union(["--restore", "--state"]), flags: RemoteConfig.flags.union(["--json"]))
        guard options.positionals.count == 1 else { throw CLIError.usage("versions needs one PATH; see --help") }
        let restore = try options.value("--restore").map { text -> Int in
            guard let n = Int(text), n >= 1, n <= 1_000_000 else { throw CLIError.usage("--restore takes a version number from the list (1, 2, ...), got '\(text)'") }
            return n
        }
        let path = WorkspacePath(options.positionals[0])
        let state = path.stateFolder(options)
        let node = try CatalogNode.find(path, stateFolder: state)
        guard node.kind == "file" else {
            throw CLIError("'\(path.path)' is a \(node.kind); only files have versions", code: ExitCode.usage)
        }
        let (client, server) = try TrashCommand.client(options, stateFolder: state)
        let versions: [TreeVersion]
        do { versions = try client.nodeVersions(id: node.id) } catch {
            if case .notFound = error {
                throw CLIError("the server does not know '\(path.path)' (node \(node.id)); the drive has not synced it yet, or the server was reset", code: ExitCode.noInput)
            }
            throw TrashCommand.serverError(error, server, doing: "list the versions of '\(path.path)'")
        }
        guard let n = restore else { return list(versions, node: node, json: options.has("--json")) }
        guard n <= versions.count else {
            throw CLIError.usage("'\(path.path)' has \(versions.count) version(s); there is no version \(n) (see 'vdrive versions \(options.positionals[0])')")
        }
        return try make(versions[n - 1], number: n, current: node, path: path, client: client, server: server)
    }

    static func list(_ versions: [TreeVersion], node: CatalogNode, json: Bool) -> Int32 {
        if json {
            struct Item: Encodable { var number: Int; var sequence: Int64; var device: String; var recordedAt: Int64; var size: Int64; var hash: String; var current: Bool }
            let items = versions.enumerated().map {
                Item(number: $0.offset + 1, sequence: $0.element.sequence, device: $0.element.device, recordedAt: $0.element.recordedAt,
                     size: $0.element.size, hash: $0.element.hash, current: $0.offset == versions.count - 1)
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: (try? encoder.encode(items)) ?? Data("[]".utf8), as: UTF8.self))
            return ExitCode.ok
        }
        print("  N  " + "WHEN".padding(21) + "DEVICE".padding(14) + "SIZE".padding(10) + "HASH")
        for (i, v) in versions.enumerated() {
            let number = String(i + 1)
            print(String(repeating: " ", count: max(0, 3 - number.count)) + number + "  " + TimeText.show(v.recordedAt).padding(21)
                  + v.device.padding(14) + ByteCountText.format(v.size).padding(10) + String(v.hash.prefix(16))
                  + (i == versions.count - 1 ? "  (current)" : ""))
        }
        if node.changedHere { print("This drive has a change of it not sent yet: it becomes the next version.") }
        return ExitCode.ok
    }

    static func make(_ version: TreeVersion, number: Int, current node: CatalogNode, path: WorkspacePath,
                     client: WorkspaceClient, server: String) throws -> Int32 {
        if node.changedHere {
            throw CLIError("'\(path.path)' was changed on this drive and the change is not on the server yet; wait until it is ('vdrive status'), then run this again",
                           code: ExitCode.tempFail)
        }
        if version.hash == node.hash {
            print("Version \(number) of '\(path.path)' is its current content; nothing to do.")
            return ExitCode.ok
        }
        let now = Int64(Date().timeIntervalSince1970 * 1e9)
        let put = TreePut(id: node.id, base: node.version, parent: node.parent, name: node.name, kind: .file,
                          hash: version.hash, size: version.size, mtime: now, executable: node.executable)
        let result: TreeResult
        do {
            guard let first = try client.applyTreeChanges([.put(put)]).first else {
                throw CLIError("the server answered no result for the change of '\(path.path)'", code: ExitCode.unavailable)
            }
            result = first
        } catch let error as ClientError {
            throw TrashCommand.serverError(error, server, doing: "make version \(number) of '\(path.path)' current")
        }
        switch (result.status, result.error) {
        case (200, _), (201, _):
            let made = result.node.map { " (tree version \($0.version))" } ?? ""
            print("Version \(number) of '\(path.path)' is current again\(made); every device gets it as its mirror follows the server. The history is kept.")
            return ExitCode.ok
        case (409, TreeResult.conflict?):
            let by = result.node.map { $0.deleted ? " (it was deleted by \($0.deletedBy ?? $0.device))" : " (now changed by \($0.device) at \(TimeText.show($0.changedAt)))" } ?? ""
            throw CLIError("'\(path.path)' changed since this drive last synced it\(by); nothing was done. Wait until the drive is up to date ('vdrive status'), check 'vdrive versions' again, and run this again",
                           code: ExitCode.tempFail)
        default:
            throw CLIError("the server refused to make version \(number) of '\(path.path)' current: \(result.error ?? "status \(result.status)"): \(result.message ?? "")",
                           code: ExitCode.dataError)
        }
    }
}
