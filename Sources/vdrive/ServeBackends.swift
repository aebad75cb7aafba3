import Foundation
import Server

/// The back ends every `vdrive serve` verb names the same way: `--store` (blocks: the
/// data folder by default, or `s3://…`), also read from `VDRIVE_STORE`. One place, so
/// that adding a device to a scaled server is the same command as for the embedded one.
enum ServeBackends {
    /// The valued options of the back ends, accepted by every serve verb.
    static let valued: Set<String> = ["--store"]

    /// The block store named by `--store`, else `VDRIVE_STORE`, else the data folder.
    static func store(_ options: Options) throws -> BlockStoreChoice {
        let environment = ProcessInfo.processInfo.environment
        guard let text = options.value("--store") ?? environment["VDRIVE_STORE"].flatMap({ $0.isEmpty ? nil : $0 }) else { return .folder }
        do { return try BlockStoreChoice.parse(text, environment: environment) } catch {
            throw CLIError(error.description, code: ExitCode.config)
        }
    }
}
