import Server
import DeviceWiring

/// `vdrive serve check [--data DIR] [--database URL] [--store URL] [--quota SIZE]`: can a server
/// start with these back ends? Prints what it found, one fact a line, the space the blocks
/// take against the quota last; exits 0 when all is well (over the quota included: the
/// server starts, and says 507 to new bytes), else by
/// sysexits: 66 TLS file unreadable, 69 unreachable, 77 login or grants refused, 78 bad URL,
/// newer schema or a TLS certificate and key that do not make a valid pair.
/// Each back end is one check in `checks`; the object store adds its own beside the records'.
enum ServeCheckCommand {
    struct Outcome {
        var lines: [String]
        /// The exit code and message of the first problem, nil when none.
        var problem: (code: Int32, message: String)?
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued.union(ServeTLS.valued).union(["--quota"]), flags: [])
        if let extra = options.positionals.first { throw CLIError.usage("unexpected argument '\(extra)'; usage: vdrive serve check [--data DIR] [--database URL] [--store URL] [--tls-cert FILE --tls-key FILE] [--quota SIZE]") }
        let backends = try ServeBackends(options)
        let quota = try ServeSpaceCommand.quota(options)
        let checks: [(ServeBackends) -> Outcome] = [folder, records, store, { _ in ServeTLS.check(options) }]
        var failure: (code: Int32, message: String)?
        var recordsReached = true
        for (index, check) in checks.enumerated() {
            let outcome = check(backends)
            outcome.lines.forEach { print($0) }
            if index == 1, outcome.problem != nil { recordsReached = false }
            if failure == nil { failure = outcome.problem }
        }
        // Records out of reach have no usage to read.
        if recordsReached { outcome(SpaceCheck.run(backends.configuration.records, quota: quota)).lines.forEach { print($0) } }
        if let failure { throw CLIError(failure.message, code: failure.code) }
        print("ok")
        return ExitCode.ok
    }

    /// The data folder and database files are the server's user's alone (EX_CONFIG when not).
    static func folder(_ backends: ServeBackends) -> Outcome {
        let problems = DataFolderModes.problems(backends.configuration.dataDirectory)
        guard let first = problems.first else { return Outcome(lines: ["data folder \(backends.configuration.dataDirectory): private (0700)"]) }
        return Outcome(lines: problems, problem: (ExitCode.config, first))
    }

    static func records(_ backends: ServeBackends) -> Outcome {
        outcome(RecordsCheck.run(backends.configuration.records))
    }

    static func store(_ backends: ServeBackends) -> Outcome {
        outcome(StoreCheck.run(backends.store, blobRoot: backends.configuration.dataDirectory + "/blobs"))
    }

    static func outcome(_ report: RecordsCheck.Report) -> Outcome {
        Outcome(lines: report.lines, problem: report.problem.map { problem in
            switch problem.kind {
            case .unavailable: return (ExitCode.unavailable, problem.message)
            case .configuration: return (ExitCode.config, problem.message)
            case .permission: return (ExitCode.noPermission, problem.message)
            }
        })
    }
}
