import Foundation
import Client
import HTTPClient
#if canImport(Glibc)
import Glibc
#endif

/// Which workspace server this machine backs up to: `$XDG_CONFIG_HOME/vdrive/remote.json`
/// (`{"url": "http://127.0.0.1:8420", "tokenFile": "/home/me/.config/vdrive/token"}`),
/// overridden by `--server URL` and `--token-file FILE`. The token itself lives in its
/// own file, readable by the user only. `caFile` (or `--ca-file FILE`) names the PEM
/// certificate of a private CA to trust for an https server; `allowInsecureHTTP` (or
/// `--allow-insecure-http`) lets the token cross plain HTTP to another machine.
public struct RemoteConfig: Codable {
    public var url: String
    public var tokenFile: String
    /// Set by ./mount when it runs a server on this machine for this user.
    public var localServerData: String?
    public var caFile: String?
    public var allowInsecureHTTP: Bool?

    public static var path: String { Paths.configHome + "/remote.json" }

    /// Refuses, before any connection, a token bound for plain HTTP to another machine
    /// (78) and a CA file that cannot be read (66).
    public func check() throws {
        if allowInsecureHTTP != true, let refusal = PlainHTTP.refusal(baseURL: url) { throw CLIError(refusal, code: ExitCode.config) }
        if let caFile, access(Paths.absolute(caFile), R_OK) != 0 {
            throw CLIError("cannot read the CA file \(caFile) (--ca-file or \"caFile\" in \(Self.path)): \(String(cString: strerror(errno))); give the PEM certificate of the CA that signed the server's", code: ExitCode.noInput)
        }
    }

    /// The configured remote (remote.json, then `server` and `tokenFile` over it), not yet
    /// checked, or nil when none is set up (backup then waits and says so).
    public static func load(server: String?, tokenFile: String?) throws -> RemoteConfig? {
        var config: RemoteConfig?
        if let data = FileManager.default.contents(atPath: path) {
            do { config = try JSONDecoder().decode(RemoteConfig.self, from: data) } catch {
                throw CLIError("\(path) is not valid ({\"url\": ..., \"tokenFile\": ...}): \(error); fix or remove it", code: ExitCode.config)
            }
        }
        if let server {
            config = RemoteConfig(url: server, tokenFile: tokenFile ?? config?.tokenFile ?? Paths.configHome + "/token", localServerData: nil,
                                  caFile: config?.caFile, allowInsecureHTTP: nil)
        }
        else if let tokenFile, config != nil { config!.tokenFile = tokenFile }
        return config
    }

    public func token() throws -> String {
        guard let data = FileManager.default.contents(atPath: Paths.absolute(tokenFile)) else {
            throw CLIError("cannot read the device token file \(tokenFile); create a device with 'vdrive serve device add NAME' on the server and save its token there", code: ExitCode.noInput)
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if token.isEmpty { throw CLIError("the device token file \(tokenFile) is empty", code: ExitCode.config) }
        return token
    }

    public func client(timeouts: Timeouts = Timeouts()) throws -> WorkspaceClient {
        WorkspaceClient(baseURL: url, token: try token(), timeouts: timeouts, caFile: caFile.map(Paths.absolute),
                        allowInsecureHTTP: allowInsecureHTTP == true)
    }
}
