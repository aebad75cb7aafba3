import Foundation
import DeviceWiring
import Backup
import Drive
import Storage
import Crypto

/// `vdrive check [--state DIR] [--prune]`: reads every block an unmounted workspace's
/// catalog names and checks it hashes to its name (Drive's `BlockAudit`, the code the
/// mount runs after an unclean stop). It holds the state folder's lock, so no mount
/// changes the store while it reads.
enum CheckCommand {
    static var verb: Verb {
        Verb(name: "check", summary: "check that every stored block is present and sound (unmounted)", help: """
        Usage: vdrive check [--state DIR] [--prune]

        Reads every block the workspace's catalog names (files kept here and small files'
        bytes kept in the catalog) and checks that each is present and hashes to its name.
        Blocks only the server holds (online only) are counted, not read. Reports each
        missing or wrong block with the files that use it. Changes nothing, except with
        --prune: block files that no row names (left by a kill; space only) are removed.

        The workspace must not be mounted: unmount it first.

        Exit codes: 0 every block is sound; 65 a block is missing or wrong (its files read
        as EIO unless the server holds the block: mount with a server to fetch it again);
        66 no workspace in DIR; 75 the workspace is in use by another vdrive process;
        78 the catalog was made by a newer vdrive.
        """, run: run)
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--state"], flags: ["--prune"])
        guard options.positionals.isEmpty else {
            throw CLIError.usage("vdrive check takes no operand ('\(options.positionals[0])'); name the workspace with --state DIR")
        }
        let state = Paths.absolute(options.value("--state") ?? BackupPaths.stateFolder)
        let catalogPath = BackupPaths.catalog(in: state)
        guard FileManager.default.fileExists(atPath: catalogPath) else {
            throw CLIError("no workspace in \(state) (no catalog.sqlite); name one with --state DIR", code: ExitCode.noInput)
        }
        let folder = try StateFolder.open(state)
        defer { folder.release() }
        let db: Database
        let blobs: BlobStore
        do {
            db = try Database(path: catalogPath)
            try db.refuseNewerSchema(known: DriveFileSystem.catalogMigrations(extra: WiringSchema.catalogExtras))
            blobs = try BlobStore(root: state + "/blobs")
        } catch let error as MigrationError {
            throw CLIError(error.description, code: ExitCode.config)
        }
        let total = try db.queryOne("SELECT coalesce(sum(size), 0) FROM blocks WHERE resident = 1") { $0.int64(0) } ?? 0
        let progress = CheckProgress(total: total)
        let report: BlockAudit.Report
        do {
            let packPath = PackFile.path(besideCatalog: catalogPath)
            let pack = FileManager.default.fileExists(atPath: packPath) ? try PackFile(path: packPath, writable: false) : nil
            report = try BlockAudit.run(db, blobs: blobs, pack: pack, progress: { progress.add($0) })
        } catch {
            progress.finish()
            throw CLIError("could not read the catalog in \(state): \(error)", code: ExitCode.ioError)
        }
        progress.finish()
        print("Checked \(report.checked) block(s), \(ByteCountText.format(report.checkedBytes)), in \(state).")
        if report.onlineOnly > 0 {
            print("\(report.onlineOnly) block(s) are online only: the server holds them, a read fetches them.")
        }
        if !report.unnamedFiles.isEmpty {
            if options.has("--prune") {
                for d in report.unnamedFiles { blobs.remove(d) }
                print("Removed \(report.unnamedFiles.count) block file(s) no row names.")
            } else {
                print("\(report.unnamedFiles.count) block file(s) no row names (space only; --prune removes them).")
            }
        }
        guard !report.isSound else {
            print("Every block is present and sound.")
            return ExitCode.ok
        }
        for finding in report.findings {
            let paths = (try? BlockAudit.paths(using: finding.digest, in: db)) ?? []
            let used = paths.isEmpty ? "no file uses it" : "used by " + paths.prefix(3).map { "'\($0)'" }.joined(separator: ", ")
                + (paths.count > 3 ? " and \(paths.count - 3) more" : "")
            print("\(finding.problem.rawValue): block \(finding.digest.hex), \(used)")
        }
        printError("\(report.findings.count) block(s) in \(state) are missing or wrong: their files read as EIO unless the server holds them (mount with a server to fetch them again); copy out what reads, and keep this folder for inspection")
        return ExitCode.dataError
    }
}

/// "Checking: 1.2 GB of 5.6 GB" on a terminal (stderr), at most a few times a second;
/// nothing in a pipe.
private final class CheckProgress {
    let total: Int64
    var done: Int64 = 0
    var shownAt = Date.distantPast
    let terminal = isatty(2) == 1

    init(total: Int64) { self.total = total }

    func add(_ bytes: Int64) {
        done += bytes
        guard terminal, Date().timeIntervalSince(shownAt) > 0.25 else { return }
        shownAt = Date()
        let line = "\r\u{1B}[2KChecking: \(ByteCountText.format(done)) of \(ByteCountText.format(total))"
        FileHandle.standardError.write(Data(line.utf8))
    }

    func finish() {
        if terminal && shownAt != .distantPast { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)) }
    }
}
