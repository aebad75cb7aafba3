import Backup
import DeviceWiring
import Storage

/// `vdrive backup retry|list`: acts on the queue in the catalog database.
enum BackupCommand {
    static var verb: Verb { Verb(
        name: "backup", summary: "retry failed backups, list the queue",
        help: """
        Usage: vdrive backup retry [--state DIR]          failed items back to pending
               vdrive backup list [STATE] [--state DIR]   items by state (pending, uploading,
                                                          done, failed; default: all)

        DIR is the state folder (default: that of the mounted drive the current folder is
        on, else $XDG_DATA_HOME/vdrive/drive); the queue lives in its catalog.sqlite.
        A running mount starts on retried items at once.
        """,
        run: run) }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ["--state"], flags: [])
        let args = options.positionals
        guard let action = args.first else { throw CLIError.usage("backup needs 'retry' or 'list'; see --help") }
        let stateFolder = BackupPaths.from(options).state
        let queue = try open(BackupPaths.catalog(in: stateFolder))
        switch action {
        case "retry":
            guard args.count == 1 else { throw CLIError.usage("retry takes no arguments") }
            let count = try queue.retryFailed()
            if count > 0 { try? BackupEngine.nudge(stateFolder: stateFolder) }  // a running mount starts now
            print(count == 1 ? "1 failed item queued again." : "\(count) failed items queued again.")
        case "list":
            guard args.count <= 2 else { throw CLIError.usage("list takes at most one state") }
            var states = BackupItemState.allCases
            if args.count == 2 {
                guard let state = BackupItemState(rawValue: args[1]) else {
                    throw CLIError.usage("unknown state '\(args[1])'; one of pending, uploading, done, failed")
                }
                states = [state]
            }
            for state in states {
                for entry in try queue.listing(state) {
                    var line = "\(state.rawValue)\t\(entry.item.path)"
                    if let reason = entry.item.failureReason { line += "\t\(reason)" }
                    print(line)
                }
            }
        default:
            throw CLIError.usage("unknown backup action '\(action)'; see --help")
        }
        return ExitCode.ok
    }

    static func open(_ catalog: String) throws -> BackupQueue {
        guard FileIO.exists(catalog) else {
            throw CLIError("\(catalog): no catalog here; mount once, or pass --state DIR", code: ExitCode.noInput)
        }
        do {
            let db = try Database(path: catalog, options: .init(create: false))
            try BackupSchema.apply(to: db)
            return BackupQueue(db: db)
        } catch {
            throw CLIError("\(catalog): \(error)", code: ExitCode.config)
        }
    }
}
