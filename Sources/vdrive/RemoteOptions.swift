import DeviceWiring

/// How the verbs that talk to the server take its settings on the command line.
extension RemoteConfig {
    /// The options every command that talks to the server takes.
    static let valued: Set<String> = ["--server", "--token-file", "--ca-file"]
    static let flags: Set<String> = ["--allow-insecure-http"]
    static let help = """
      --ca-file FILE     PEM certificate of the CA that signed the server's certificate
                         (a private CA; default: the system's CAs, or "caFile" in remote.json)
      --allow-insecure-http
                         send the token over plain http:// to another machine (refused
                         otherwise: anyone on the path could read it)
    """

    /// The remote of the options and remote.json (or the one the drive in `stateFolder`
    /// remembers), checked (`check`), or nil when none is set up.
    static func load(_ options: Options, stateFolder: String? = nil) throws -> RemoteConfig? {
        guard var config = try load(server: options.value("--server"), tokenFile: options.value("--token-file"), stateFolder: stateFolder) else { return nil }
        if let caFile = options.value("--ca-file") { config.caFile = caFile }
        if options.has("--allow-insecure-http") { config.allowInsecureHTTP = true }
        try config.check()
        return config
    }

    /// The arguments that carry these settings to a child process (the mount's daemon).
    var arguments: [String] {
        ["--server", url, "--token-file", tokenFile] + (caFile.map { ["--ca-file", Paths.absolute($0)] } ?? [])
            + (allowInsecureHTTP == true ? ["--allow-insecure-http"] : [])
    }
}
