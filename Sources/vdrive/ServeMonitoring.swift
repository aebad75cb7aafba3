import Foundation
import DeviceWiring
import Server

/// The `vdrive serve` options of what an operator watches: `--access-log off|stderr`
/// (one line per request) and `--metrics-token FILE` (who may read `GET /metrics`).
/// Docs/operations.md, "Access log" and "Metrics".
enum ServeMonitoring {
    static let valued: Set<String> = ["--access-log", "--metrics-token"]

    static let help = """
      --access-log off|stderr  one line per request on stderr, key=value (default: stderr)
      --metrics-token FILE     GET /metrics needs 'Authorization: Bearer <the file's token>'
                               (16 characters or more), from any address; without it,
                               /metrics answers loopback clients only
    """

    /// The shortest token accepted: a guessable one would open the counters to anyone.
    static let minimumTokenLength = 16

    static func apply(_ options: Options, to configuration: inout ServerConfiguration) throws {
        if let text = options.value("--access-log") {
            guard let mode = AccessLogMode(rawValue: text) else {
                throw CLIError.usage("--access-log must be off or stderr, got '\(text)'")
            }
            configuration.accessLog = mode
        }
        if let path = options.value("--metrics-token") {
            configuration.metricsToken = try token(Paths.absolute(path))
        }
    }

    /// The token in `path`: its first line, without surrounding white space.
    static func token(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CLIError("cannot read the metrics token file \(path); make one with 'head -c 32 /dev/urandom | base64 > \(path)'", code: ExitCode.noInput)
        }
        let text = String(decoding: data, as: UTF8.self)
        let token = (text.split(whereSeparator: \.isNewline).first.map(String.init) ?? "").trimmingCharacters(in: .whitespaces)
        guard token.count >= minimumTokenLength, !token.contains(where: { $0.isWhitespace }) else {
            throw CLIError.usage("the metrics token in \(path) must be one word of \(minimumTokenLength) characters or more; make one with 'head -c 32 /dev/urandom | base64 > \(path)'")
        }
        return token
    }
}
