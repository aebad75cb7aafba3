import enum Backup.ByteCountText
import DeviceWiring
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
    Usage: vdrive restore DEVICE DEST [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--now]
                          [--transfers N] [--server URL --token-file FILE] [--config FILE]
                          [--ca-file FILE] [--allow-insecure-http]

    Copies the current version of every file DEVICE backed up to DEST, under the
    paths it had on that device (DEST/Camera Roll/IMG_0001.jpg). Each file is
    fetched block by block, every block checked against its SHA-256, into a hidden
    temporary file that is written to disk and renamed into place only when complete;
    its modification time is set to its capture date (else its recorded mtime).

    Interrupted (Ctrl-C, kill -9, a lost connection), run it again: files already at
    DEST with the right content are not fetched again, and a half-fetched file keeps
    the blocks it has. A file at DEST with other content is never overwritten: it is
    left as it is, reported, and the restore ends with 73.

    --since/--until keep files captured on or after / on or before that day (both
    included; files without a capture date go by their modification time).
    --transfers N   blocks fetched at once, each on its own connection (default 4).
    --now           go ahead even when backup is held: a restore waits, saying why,
                    while 'vdrive pause' is on, on a metered network (unless
                    allow-metered) or on a low battery ($XDG_CONFIG_HOME/vdrive/settings.json,
                    or --config FILE).
    The server is the one the drive uses ($XDG_CONFIG_HOME/vdrive/remote.json), or
    --server with --token-file. Progress and time left are shown on a terminal.
    \(RemoteConfig.help)

    Exit codes: 0 everything restored, 64 usage, 65 the server lacks or damaged some
    content, 66 DEVICE has no backups, 73 DEST cannot be written (or holds other
    files under those names), 75 the server could not be reached for some files (run
    again), 77 the token was refused, 78 no server configured, its TLS certificate
    refused, or a token bound for plain HTTP to another machine.
    """

    static let defaultTransfers = 4

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: RemoteConfig.valued.union(["--since", "--until", "--config", "--transfers"]), flags: RemoteConfig.flags.union(["--now"]))
        guard options.positionals.count == 2 else {
            throw CLIError.usage("restore needs DEVICE and DEST (e.g. 'vdrive restore phone ~/Restored'), got \(options.positionals.count) argument(s); see --help")
        }
        let device = options.positionals[0]
        let destination = Paths.absolute(options.positionals[1])
        let selection = try RestoreSelection(since: options.value("--since"), until: options.value("--until"))
        let transfers = try options.value("--transfers").map { text -> Int in
            guard let n = Int(text), (1...64).contains(n) else { throw CLIError.usage("--transfers takes a number from 1 to 64, got '\(text)'") }
            return n
        } ?? defaultTransfers
        guard let remote = try RemoteConfig.load(options) else {
            throw CLIError("no workspace server is configured; run ./mount once, or pass --server URL --token-file FILE", code: ExitCode.config)
        }
        let client = try remote.client()
        let listing = RestoreListing(client: client, device: device)

        // First pass: the totals for the progress line, page by page (nothing kept).
        var listed = 0, chosen = 0, chosenBytes: Int64 = 0
        do {
            try listing.forEachPage { page in
                listed += page.count
                for record in page where selection.includes(record) { chosen += 1; chosenBytes += record.size }
            }
        } catch { throw cliError(error, server: remote.url) }
        if listed == 0 {
            throw CLIError("device '\(device)' has no backups on \(remote.url); check the name (each device's records are listed by GET /v1/files)", code: ExitCode.noInput)
        }
        do { try FileIO.makeDirectories(destination, mode: 0o755) } catch {
            throw CLIError("cannot create \(destination): \(error)", code: ExitCode.cantCreate)
        }

        let settingsPath = options.value("--config").map(Paths.absolute) ?? BackupPaths.settings
        let policy = BackupWiring.policy(probeInterval: 5)
        let report = RestoreReport(progress: RestoreProgress(totalFiles: chosen, totalBytes: chosenBytes))
        if options.has("--now"), let hold = RestoreGate(settingsPath: settingsPath, policy: policy).hold() {
            report.note("Restoring now (--now) although backup is held: \(hold.reason).")
        }
        let gate = RestoreGate(settingsPath: options.has("--now") ? nil : settingsPath, policy: policy)
        let pool = RestoreTransfers(count: transfers, restorer: FileRestorer(client: client, destination: destination), report: report, gate: gate)

        // Second pass: each chosen file to the transfer threads as its page arrives.
        var submitted = 0
        do {
            try listing.forEachPage { page in
                for record in page where selection.includes(record) {
                    pool.submit(record)
                    submitted += 1
                }
            }
        } catch {
            report.note("the listing of '\(device)' broke off after \(submitted) file(s): \(error)")
        }
        pool.finish()
        if submitted < chosen { report.unlisted(chosen - submitted) }
        let tally = report.tally
        for folder in tally.folders { try? FileIO.syncDirectory(folder) }
        report.close()

        let skipped = listed - chosen
        print("Restored \(tally.restored) file(s) of device '\(device)' to \(destination) (\(ByteCountText.format(tally.downloaded)) fetched)"
              + (tally.alreadyThere > 0 ? ", \(tally.alreadyThere) already there" : "")
              + (skipped > 0 ? ", \(skipped) outside the dates" : "")
              + (tally.failed > 0 ? ", \(tally.failed) not restored (listed above)." : "."))
        return report.exitCode
    }

    static func cliError(_ error: ClientError, server: String) -> CLIError {
        switch error {
        case .insecure(let m): return CLIError(m, code: ExitCode.config)
        case .http(401, _): return CLIError("the server \(server) refused this device's token (revoked?); make a new one with 'vdrive serve device add NAME'", code: ExitCode.noPermission)
        default:
            return CLIError("cannot list the backups on \(server): \(error)", code: error.isTransient ? ExitCode.tempFail : ExitCode.unavailable)
        }
    }
}
