import Backup
import DeviceWiring
import Drive
import Foundation
import Storage
import WorkspaceMirror
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive status [--watch] [--json]`: the backup status the engine last wrote to the state
/// folder. On a terminal, `--watch` redraws a progress bar in place; in a pipe it prints
/// a plain line each time the status changes. It waits on inotify, not on a timer.
enum StatusCommand {
    static var verb: Verb { Verb(
        name: "status", summary: "show backup progress and the workspace's sync (--watch to follow the backup)",
        help: """
        Usage: vdrive status [--watch] [--json] [--state DIR]

        Shows what camera-roll backup is doing: items and bytes left, rate, time left, or
        why it waits; then the drive's storage: bytes of blocks held for local files,
        cached from the server, and online only (fetched when read); then the synced
        workspace: changes waiting to go up and to come down, conflict copies made,
        failed sends and why, and whether the server can be reached (as the running
        mount sees it; without a mount, what the catalog says waits). --watch follows
        the backup's changes until interrupted (a progress bar on a terminal, one line
        per change in a pipe). --json prints status.json as written.

        The drive: --state DIR's, else the mounted drive the current folder is on,
        else $XDG_DATA_HOME/vdrive/drive.
        """,
        run: run) }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--state"], flags: ["--watch", "--json"])
        let file = StatusFile(stateFolder: BackupPaths.from(options).state)
        guard options.has("--watch") else {
            guard let status = try read(file) else {
                print("No backup status yet (nothing has run in \(file.stateFolder)).")
                if let storage = storageLine(stateFolder: file.stateFolder) { print(storage) }
                if let workspace = workspaceLine(stateFolder: file.stateFolder) { print(workspace) }
                return ExitCode.ok
            }
            print(options.has("--json") ? String(decoding: status.json(), as: UTF8.self) : status.line + staleness(status))
            if !options.has("--json"), let storage = storageLine(stateFolder: file.stateFolder) { print(storage) }
            if !options.has("--json"), let workspace = workspaceLine(stateFolder: file.stateFolder) { print(workspace) }
            return ExitCode.ok
        }
        let changed = DispatchSemaphore(value: 1)
        let watcher = try FileChangeWatcher(path: file.jsonPath) { changed.signal() }
        defer { watcher.stop() }
        let terminal = isatty(1) == 1
        var last: String?
        if (try? read(file)) == nil { print("No backup status yet; waiting for one in \(file.stateFolder).") }
        while true {
            changed.wait()
            guard let status = try? read(file) else { continue }
            let text = options.has("--json") ? String(decoding: status.json(), as: UTF8.self) : status.line
            guard text != last else { continue }
            last = text
            if terminal && !options.has("--json") {
                print("\r\u{1B}[2K" + progressBar(status) + text, terminator: "")
                fflush(nil)  // nil: all streams; `stdout` is a C global Swift 6 will not touch
            } else {
                print(text)
                fflush(nil)  // nil: all streams; `stdout` is a C global Swift 6 will not touch
            }
        }
    }

    /// The workspace mirror's line: the running mount's, which knows everything (the
    /// server unreachable, conflicts, failures); without one, what the catalog says waits
    /// to go up and to come down. Nil without a catalog or before the mirror's tables exist.
    static func workspaceLine(stateFolder: String) -> String? {
        if let live = WorkspaceStatusFile(stateFolder: stateFolder).read() { return live }
        guard let db = try? Database(path: stateFolder + "/catalog.sqlite", options: .init(readOnly: true, create: false)),
              let status = try? MirrorStatus.stored(in: db) else { return nil }
        let waits = status.waitingUp > 0 || status.waitingDown > 0
        return status.line + (waits && !StateFolder.isHeld(stateFolder) ? " · the drive is not mounted: they go when it is" : "")
    }

    /// A hint when a "backing up" status has not been refreshed for two minutes: the
    /// process that wrote it may be gone (killed, unmounted uncleanly).
    static func staleness(_ status: BackupStatus, now: Double = Date().timeIntervalSince1970) -> String {
        guard status.state == .backingUp, now - status.updatedAt > 120 else { return "" }
        return " (last updated \(Int((now - status.updatedAt) / 60)) min ago; is the drive mounted?)"
    }

    /// "Storage: 1.2 GB local · 300 MB cached · 2.1 GB online only": the drive's blocks
    /// by where they are (nil when there is no catalog yet).
    static func storageLine(stateFolder: String) -> String? {
        let catalog = BackupPaths.catalog(in: stateFolder)
        guard FileManager.default.fileExists(atPath: catalog), let t = try? ResidencyTotals.read(catalogPath: catalog) else { return nil }
        return "Storage: \(ByteCountText.format(t.local)) local · \(ByteCountText.format(t.cached)) cached · \(ByteCountText.format(t.onlineOnly)) online only"
    }

    static func read(_ file: StatusFile) throws -> BackupStatus? {
        do { return try file.read() } catch { throw CLIError("\(file.jsonPath): \(error)", code: ExitCode.dataError) }
    }

    /// "[##########----------] 50% " while backing up; empty otherwise.
    static func progressBar(_ status: BackupStatus, width: Int = 20) -> String {
        guard status.state == .backingUp, let fraction = status.fractionDone else { return "" }
        let filled = Int((fraction * Double(width)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            + "\(Int((fraction * 100).rounded(.down)))% "
    }
}
