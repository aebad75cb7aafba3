import Server
import DeviceWiring

/// `--tls-cert FILE --tls-key FILE` of `vdrive serve` and `vdrive serve check`: the
/// certificate and key the server speaks HTTPS with (Docs/operations.md, "A public
/// server from nothing, with a certificate"). The one place these options are read.
enum ServeTLS {
    static let valued: Set<String> = ["--tls-cert", "--tls-key"]

    static let help = """
      --tls-cert FILE          serve HTTPS with this PEM certificate (its chain may follow:
                               certbot's fullchain.pem); needs --tls-key
      --tls-key FILE           the certificate's unencrypted PEM private key (mode 0600 or 0640)
    """

    /// The pair named by the options, checked; nil when neither is given. For serving, an
    /// expired certificate is a warning (clients refuse it until it is renewed); for
    /// `check` it is a problem.
    static func load(_ options: Options, serving: Bool) throws -> TLSConfiguration? {
        let certificate = options.value("--tls-cert"), key = options.value("--tls-key")
        guard certificate != nil || key != nil else { return nil }
        guard let certificate, let key else {
            throw CLIError.usage(certificate == nil ? "--tls-key needs --tls-cert FILE (the certificate)" : "--tls-cert needs --tls-key FILE (the private key)")
        }
        let tls: TLSConfiguration
        do {
            tls = try TLSConfiguration.load(certificateFile: Paths.absolute(certificate), keyFile: Paths.absolute(key), allowExpired: serving)
        } catch {
            throw CLIError(error.description, code: error.isUnreadable ? ExitCode.noInput : ExitCode.config)
        }
        if let problem = tls.problem { printError("warning: \(tls.describe(problem))") }
        return tls
    }

    /// `vdrive serve check`'s lines for the pair (none without the options).
    static func check(_ options: Options) -> ServeCheckCommand.Outcome {
        do {
            guard let tls = try load(options, serving: false) else { return ServeCheckCommand.Outcome(lines: []) }
            return ServeCheckCommand.Outcome(lines: ["tls: certificate \(tls.certificateFile) and key \(tls.keyFile) match and are valid now"])
        } catch let error as CLIError {
            return ServeCheckCommand.Outcome(lines: ["tls: not usable"], problem: (error.code, error.message))
        } catch {
            return ServeCheckCommand.Outcome(lines: ["tls: not usable"], problem: (ExitCode.config, "\(error)"))
        }
    }
}
