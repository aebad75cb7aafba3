import Foundation
import DeviceWiring
import Server

/// `vdrive serve backup delete DEVICE PATH [--version HASH] --yes`: the one way a
/// backed-up version is deleted (nothing a device sends deletes one). Without `--yes`
/// it lists what it would delete and changes nothing, so a typo costs nothing.
enum ServeBackupCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued.union(["--version"]), flags: ["--yes"])
        let words = options.positionals
        guard words.first == "delete" else {
            throw CLIError.usage("usage: vdrive serve backup delete DEVICE PATH [--version HASH] --yes; see 'vdrive serve --help'")
        }
        guard words.count == 3 else {
            throw CLIError.usage("backup delete needs DEVICE and PATH (e.g. phone 'Camera Roll/IMG_0001.jpg'), got \(words.count - 1) argument(s)")
        }
        let (device, path, version) = (words[1], words[2], options.value("--version"))
        let admin: BackupAdmin
        let backends = try ServeBackends(options)
        do { admin = try BackupAdmin(dataDirectory: backends.dataDirectory, database: backends.database) } catch { throw ServeCommand.cliError(error) }
        do {
            guard options.has("--yes") else {
                let doomed = try admin.versions(device: device, path: path, version: version)
                for v in doomed { print("would delete " + describe(v)) }
                printError("nothing deleted: add --yes to delete \(doomed.count) version(s) of '\(path)' of device '\(device)'")
                return ExitCode.usage
            }
            for v in try admin.delete(device: device, path: path, version: version) { print("deleted " + describe(v)) }
        } catch let e as BackupAdmin.Failure {
            throw CLIError(e.description, code: ExitCode.dataError)
        }
        return ExitCode.ok
    }

    static func describe(_ v: BackupAdmin.Version) -> String {
        "\(v.device)\t\(v.path)\t\(v.hash)\t\(v.size) bytes\tsequence \(v.sequence)\(v.isCurrent ? "\tcurrent" : "")"
    }
}
