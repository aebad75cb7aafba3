import Foundation
import Client

/// Which workspace server this machine backs up to: `$XDG_CONFIG_HOME/vdrive/remote.json`
/// (`{"url": "http://127.0.0.1:8420", "tokenFile": "/home/me/.config/vdrive/token"}`),
/// overridden by `--server URL` and `--token-file FILE`. The token itself lives in its
/// own file, readable by the user only.
struct RemoteConfig: Codable {
    var url: String
    var tokenFile: String
    /// Set by ./mount when it runs a server on this machine for this user.
    var localServerData: String?

    static var path: String { Paths.configHome + "/remote.json" }

    /// The configured remote, or nil when none is set up (backup then waits and says so).
    static func load(server: String?, tokenFile: String?) throws -> RemoteConfig? {
        var config: RemoteConfig?
        if let data = FileManager.default.contents(atPath: path) {
            do { config = try JSONDecoder().decode(RemoteConfig.self, from: data) } catch {
                throw CLIError("\(path) is not valid ({\"url\": ..., \"tokenFile\": ...}): \(error); fix or remove it", code: ExitCode.config)
            }
        }
        if let server { config = RemoteConfig(url: server, tokenFile: tokenFile ?? config?.tokenFile ?? Paths.configHome + "/token", localServerData: nil) }
        else if let tokenFile, config != nil { config!.tokenFile = tokenFile }
        return config
    }

    func token() throws -> String {
        guard let data = FileManager.default.contents(atPath: Paths.absolute(tokenFile)) else {
            throw CLIError("cannot read the device token file \(tokenFile); create a device with 'vdrive serve device add NAME' on the server and save its token there", code: ExitCode.noInput)
        }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if token.isEmpty { throw CLIError("the device token file \(tokenFile) is empty", code: ExitCode.config) }
        return token
    }

    func client() throws -> WorkspaceClient {
        WorkspaceClient(baseURL: url, token: try token())
    }
}
