import enum Backup.ByteCountText
import Client
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive restore DEVICE DEST [--since DAY] [--until DAY]`: copies a device's current
/// backups from the workspace server to DEST under the paths they had on that device
/// (`DEST/Camera Roll/...`). Safe to interrupt and run again (RestoreFile.swift).
enum RestoreCommand {
    static var verb: Verb { Verb(name: "restore", summary: "copy a device's backups to a folder (resumable)", help: help, run: run) }

    static let help = """
    Usage: vdrive restore DEVICE DEST [--since YYYY-MM-DD] [--until YYYY-MM-DD]
                          [--server URL --token-file FILE]

    Copies the current version of every file DEVICE backed up to DEST, under the
    paths it had on that device (DEST/Camera Roll/IMG_0001.jpg). Each file is
    fetched block by block, every block checked against its SHA-256, into a hidden
    temporary file that is renamed into place only when complete; its modification
    time is set to its capture date (else its recorded mtime).

    Interrupted (Ctrl-C, kill -9, a lost connection), run it again: files already at
    DEST with the right content are not fetched again, and a half-fetched file keeps
    the blocks it has. A file at DEST with other content is left alone and reported.

    --since/--until keep files captured on or after / on or before that day (both
    included; files without a capture date go by their modification time).
    The server is the one the drive uses ($XDG_CONFIG_HOME/vdrive/remote.json), or
    --server with --token-file. Progress and time left are shown on a terminal.

    Exit codes: 0 everything restored, 64 usage, 65 the server lacks or damaged some
    content, 66 DEVICE has no backups, 73 DEST cannot be written (or holds other
    files under those names), 75 the server could not be reached for some files (run
    again), 77 the token was refused, 78 no server configured.
    """

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--since", "--until", "--server", "--token-file"], flags: [])
        guard options.positionals.count == 2 else {
            throw CLIError.usage("restore needs DEVICE and DEST (e.g. 'vdrive restore phone ~/Restored'), got \(options.positionals.count) argument(s); see --help")
        }
        let device = options.positionals[0]
        let destination = Paths.absolute(options.positionals[1])
        let selection = try RestoreSelection(since: options.value("--since"), until: options.value("--until"))
        guard let remote = try RemoteConfig.load(server: options.value("--server"), tokenFile: options.value("--token-file")) else {
            throw CLIError("no workspace server is configured; run ./mount once, or pass --server URL --token-file FILE", code: ExitCode.config)
        }
        let client = try remote.client()

        let all: [Protocol.FileRecord]
        do { all = try client.listFiles(device: device, prefix: "") } catch { throw cliError(error, server: remote.url) }
        if all.isEmpty {
            throw CLIError("device '\(device)' has no backups on \(remote.url); check the name (each device's records are listed by GET /v1/files)", code: ExitCode.noInput)
        }
        let chosen = all.filter(selection.includes)
        do { try FileIO.makeDirectories(destination, mode: 0o755) } catch {
            throw CLIError("cannot create \(destination): \(error)", code: ExitCode.cantCreate)
        }

        var progress = RestoreProgress(totalFiles: chosen.count, totalBytes: chosen.reduce(0) { $0 + $1.size })
        var restored = 0, alreadyThere = 0, downloaded: Int64 = 0
        var failures: [(Protocol.FileRecord, RestoreFailure)] = []
        var unreachable = false
        for record in chosen {
            if unreachable {
                // The server is gone: the rest would each wait for a timeout to say the same.
                failures.append((record, .serverGone("'\(record.path)': not tried, the server was unreachable")))
                continue
            }
            var restorer = FileRestorer(client: client, destination: destination)
            restorer.progress = { bytes in progress.fetched(bytes); return true }
            do {
                switch try restorer.restore(record) {
                case .alreadyThere: alreadyThere += 1
                case .restored(let bytes): restored += 1; downloaded += bytes
                }
            } catch {
                failures.append((record, error))
                if case .serverGone = error { unreachable = true }
            }
            progress.finished(size: record.size)
        }
        progress.close()

        for (_, failure) in failures { printError("not restored: " + failure.message) }
        let skipped = all.count - chosen.count
        print("Restored \(restored) file(s) of device '\(device)' to \(destination) (\(ByteCountText.format(downloaded)) fetched)"
              + (alreadyThere > 0 ? ", \(alreadyThere) already there" : "")
              + (skipped > 0 ? ", \(skipped) outside the dates" : "")
              + (failures.isEmpty ? "." : ", \(failures.count) not restored (listed above)."))
        return exitCode(failures.map(\.1))
    }

    /// 0 when nothing failed; a permanent failure's code when there is one (running
    /// again will not help); else 75, try again.
    static func exitCode(_ failures: [RestoreFailure]) -> Int32 {
        if failures.isEmpty { return ExitCode.ok }
        if failures.contains(where: { if case .local = $0 { return true } else { return false } }) { return ExitCode.cantCreate }
        if failures.contains(where: { if case .server = $0 { return true } else { return false } }) { return ExitCode.dataError }
        return ExitCode.tempFail
    }

    static func cliError(_ error: ClientError, server: String) -> CLIError {
        switch error {
        case .http(401, _): return CLIError("the server \(server) refused this device's token (revoked?); make a new one with 'vdrive serve device add NAME'", code: ExitCode.noPermission)
        default:
            return CLIError("cannot list the backups on \(server): \(error)", code: error.isTransient ? ExitCode.tempFail : ExitCode.unavailable)
        }
    }
}
