import Foundation
import Backup
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

    /// Where a drive's state folder names the server its last mount synced with
    /// (`remember`): the nodes in that drive's catalog are that server's.
    public static func rememberedPath(in stateFolder: String) -> String { stateFolder + "/remote.json" }

    /// Written by each mount with a server, so that the commands reading this drive's
    /// catalog (`vdrive versions`, `trash`, `task`) ask the same server untold, whatever
    /// options it was mounted with. The token stays in its own file; only its path is here.
    public func remember(in stateFolder: String) throws {
        var kept = self
        kept.localServerData = nil
        kept.tokenFile = Paths.absolute(tokenFile)
        kept.caFile = caFile.map(Paths.absolute)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try AtomicFile.write(try encoder.encode(kept), to: Self.rememberedPath(in: stateFolder), durable: false)
    }

    /// The configured remote (the one `stateFolder`'s drive remembers, else remote.json;
    /// then `server` and `tokenFile` over it), not yet checked, or nil when none is set up
    /// (backup then waits and says so).
    public static func load(server: String?, tokenFile: String?, stateFolder: String? = nil) throws -> RemoteConfig? {
        var config: RemoteConfig?
        for file in [stateFolder.map { rememberedPath(in: $0) }, path].compactMap({ $0 }) {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            do { config = try JSONDecoder().decode(RemoteConfig.self, from: data) } catch {
                throw CLIError("\(file) is not valid ({\"url\": ..., \"tokenFile\": ...}): \(error); fix or remove it", code: ExitCode.config)
            }
            break
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
