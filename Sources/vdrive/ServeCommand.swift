import Server
import DeviceWiring
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// `vdrive serve`: the workspace server, and `vdrive serve device add|list|revoke`.
enum ServeCommand {
    static var verb: Verb { Verb(name: "serve", summary: "run the workspace server (uploads, dedup, files)", help: help, run: run) }

    static let help = """
    Usage: vdrive serve [--data DIR] [--database URL] [--listen HOST:PORT] [--upload-expiry SECONDS] [--store s3://…]
                        [--tls-cert FILE --tls-key FILE] [--access-log off|stderr] [--metrics-token FILE]
           vdrive serve check                 reach the database and the store: version, schema, permissions, a probe object;
                                              with --tls-cert/--tls-key, check the certificate and key;
                                              the usage, and with --quota whether it is over
           vdrive serve snapshot DEST         a consistent copy of this embedded server, running or
                                              not (records, and blocks as hard links where it can);
                                              a server started on DEST carries on where it was
           vdrive serve device add NAME       make a device and print its token (once)
           vdrive serve device list           list devices
           vdrive serve device revoke NAME    revoke a device's token at once
           vdrive serve backup delete DEVICE PATH [--version HASH] --yes
                                              delete a device's backup of PATH (every
                                              version, or one); without --yes, says what
                                              it would delete and deletes nothing
           vdrive serve gc [--dry-run] [--grace DURATION]
                                              remove contents no version records and blocks
                                              nothing names, older than the grace (24h)
           vdrive serve usage [--json]        per device: files, versions, bytes used and
                                              unique; the total, the quota, what gc frees

    Runs the workspace server on libmicrohttpd until SIGTERM or SIGINT. Records are
    in DIR/server.db (SQLite) or in PostgreSQL (--database), content in 4 MiB blocks
    in DIR/blobs. Every verb takes the same --data and --database. A data folder
    from before blocks is migrated on the first start (big blobs are split into
    blocks: that start takes about as long as reading them once). The API is in
    Docs/protocol.md and at GET /v1/openapi.json.

    Options:
    \(ServeBackends.help)
      --listen HOST:PORT       IPv4 address and port (default: 127.0.0.1:8420; port 0 picks one)
      --upload-expiry SECONDS  lifetime of presigned upload URLs (default: 604800, 7 days)
      --public-url URL         base of presigned URLs (default: http:// + the request's Host;
                               https:// with --tls-cert, or behind a TLS proxy: --public-url https://HOST)
    \(ServeTLS.help)
      --sync-every-patch       fdatasync each PATCH before recording its offset (slower; see Docs/protocol.md)
    \(ServeSpaceCommand.help)
      --max-connections-per-address N
                               open connections one IP address may hold (default: 64); more
                               are closed at once. Raise it when many devices share one
                               address (a NAT). See Docs/operations.md, "Connection limits"
      --max-connections N      open connections in all (default: 4096)
    \(ServeLimits.help)
    \(ServeMonitoring.help)
      --store s3://BUCKET?endpoint=http://HOST:PORT&region=REGION[&credentials=FILE]
                               keep blocks in an S3 bucket (created if missing) instead of
                               DIR/blobs; devices upload to it with presigned URLs. Also
                               VDRIVE_STORE. Credentials: AWS_ACCESS_KEY_ID and
                               AWS_SECRET_ACCESS_KEY, or FILE (aws_access_key_id = …,
                               aws_secret_access_key = … lines). See Docs/operations.md.

    Exit codes: 64 usage, 65 no such device, path or version (backup delete),
    66 TLS certificate or key missing or unreadable, 69 address in use, database
    unreachable or object store unusable, 73 data folder not writable, 75 another gc
    is running, 77 database login or grants refused, 78 bad --database, database
    from a newer vdrive or unusable, TLS certificate and key not a matching pair.
    """

    static func run(_ arguments: [String]) throws -> Int32 {
        if arguments.first == "device" { return try device(Array(arguments.dropFirst())) }
        if arguments.first == "backup" { return try ServeBackupCommand.run(Array(arguments.dropFirst())) }
        if arguments.first == "check" { return try ServeCheckCommand.run(Array(arguments.dropFirst())) }
        if arguments.first == "snapshot" { return try ServeSnapshotCommand.run(Array(arguments.dropFirst())) }
        if arguments.first == "gc" { return try ServeSpaceCommand.gc(Array(arguments.dropFirst())) }
        if arguments.first == "usage" { return try ServeSpaceCommand.usage(Array(arguments.dropFirst())) }
        let options = try Options(arguments, valued: ServeBackends.valued.union(ServeTLS.valued)
                                    .union(["--listen", "--upload-expiry", "--public-url", "--max-connections-per-address", "--max-connections"])
                                    .union(ServeSpaceCommand.serveOptions).union(ServeLimits.valued).union(ServeMonitoring.valued),
                                  flags: ["--sync-every-patch"])
        if let extra = options.positionals.first { throw CLIError.usage("unexpected argument '\(extra)'; see 'vdrive serve --help'") }
        var configuration = try ServeBackends(options).configuration
        if let listen = options.value("--listen") {
            let (host, port) = try parseListen(listen)
            configuration.host = host
            configuration.port = port
        }
        if let text = options.value("--upload-expiry") {
            guard let seconds = Int64(text), seconds > 0 else { throw CLIError.usage("--upload-expiry must be a number of seconds > 0, got '\(text)'") }
            configuration.uploadExpiry = seconds
        }
        configuration.publicURL = options.value("--public-url")
        configuration.connectionLimits = try connectionLimits(options)
        configuration.syncEveryPatch = options.has("--sync-every-patch")
        configuration.tls = try ServeTLS.load(options, serving: true)
        try ServeSpaceCommand.apply(options, to: &configuration)
        try ServeLimits.apply(options, to: &configuration.limits)
        try ServeMonitoring.apply(options, to: &configuration)

        // Block the stop signals in every thread (libmicrohttpd's inherit the mask); this thread waits for them.
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        sigaddset(&stopSignals, SIGTERM)
        sigaddset(&stopSignals, SIGINT)
        pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
        signal(SIGPIPE, SIG_IGN)

        let server: WorkspaceServer
        do { server = try WorkspaceServer(configuration) } catch { throw cliError(error) }
        let line = "vdrive serve: listening on \(server.baseURL) (data: \(configuration.dataDirectory); records: \(configuration.records); blocks: \(configuration.store.summary))\n"
        line.withCString { _ = write(1, $0, strlen($0)) }

        var received: Int32 = 0
        sigwait(&stopSignals, &received)
        server.stop()
        let bye = "vdrive serve: stopped (\(received == SIGINT ? "SIGINT" : "SIGTERM"))\n"
        bye.withCString { _ = write(1, $0, strlen($0)) }
        return ExitCode.ok
    }

    static func connectionLimits(_ options: Options) throws -> ConnectionLimits {
        var limits = ConnectionLimits()
        for (name, path) in [("--max-connections-per-address", \ConnectionLimits.perAddress), ("--max-connections", \ConnectionLimits.total)] {
            guard let text = options.value(name) else { continue }
            guard let n = UInt32(text), n > 0 else { throw CLIError.usage("\(name) must be a whole number > 0, got '\(text)'") }
            limits[keyPath: path] = n
        }
        if let problem = limits.problem { throw CLIError.usage(problem.prefix(1).uppercased() + problem.dropFirst() + "; see 'vdrive serve --help'") }
        return limits
    }

    static func parseListen(_ text: String) throws -> (String, UInt16) {
        guard let colon = text.lastIndex(of: ":"), let port = UInt16(text[text.index(after: colon)...]) else {
            throw CLIError.usage("--listen must be HOST:PORT such as 127.0.0.1:8420, got '\(text)'")
        }
        let host = String(text[..<colon])
        return (host.isEmpty ? "127.0.0.1" : host, port)
    }

    static func cliError(_ error: ServerError) -> CLIError {
        switch error {
        case .addressInUse, .cannotListen, .cannotStart, .store: return CLIError(error.description, code: ExitCode.unavailable)
        case .badAddress: return CLIError(error.description, code: ExitCode.usage)
        case .dataFolder: return CLIError(error.description, code: ExitCode.cantCreate)
        case .database, .newerSchema: return CLIError(error.description, code: ExitCode.config)
        case .databaseUnavailable: return CLIError(error.description, code: ExitCode.unavailable)
        case .databasePermission: return CLIError(error.description, code: ExitCode.noPermission)
        }
    }

    static func device(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued, flags: [])
        let words = options.positionals
        guard let action = words.first else { throw CLIError.usage("say what to do: 'vdrive serve device add|list|revoke'; see --help") }
        let backends = try ServeBackends(options)
        let registry: DeviceRegistry
        do { registry = try DeviceRegistry(dataDirectory: backends.dataDirectory, database: backends.database) } catch { throw cliError(error) }
        do {
            switch (action, words.count) {
            case ("add", 2):
                let token = try registry.add(words[1])
                print(token)
                printError("device '\(words[1])' added; the token above is shown only once; give it to the device")
            case ("list", 1):
                for d in try registry.list() {
                    let state = d.revokedAt == nil ? "active" : "revoked"
                    let mark = d.watermarkSequence.map { "watermark \($0)" } ?? "no watermark"
                    print("\(d.name)\t\(state)\tcreated \(d.createdAt)\t\(mark)")
                }
            case ("revoke", 2):
                try registry.revoke(words[1])
                print("device '\(words[1])' revoked")
            default:
                throw CLIError.usage("usage: vdrive serve device add NAME | list | revoke NAME")
            }
        } catch let e as DeviceRegistry.Failure {
            throw CLIError(e.description, code: ExitCode.dataError)
        }
        return ExitCode.ok
    }
}
