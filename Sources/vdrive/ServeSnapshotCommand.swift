import Foundation
import DeviceWiring
import Server

/// `vdrive serve snapshot DEST`: a consistent copy of a running embedded server
/// (`Server.ServerSnapshot`), from which `vdrive serve --data DEST` starts.
enum ServeSnapshotCommand {
    static func run(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued, flags: [])
        guard options.positionals.count == 1 else {
            throw CLIError.usage("usage: vdrive serve snapshot DEST [--data DIR] [--store s3://…]; see 'vdrive serve --help'")
        }
        let backends = try ServeBackends(options)
        if backends.database != nil {
            throw CLIError.usage("the records are in PostgreSQL: back them up with pg_dump (and the store with its own tools); 'snapshot' copies an embedded server's SQLite records and block folder")
        }
        let destination = Paths.absolute(options.positionals[0])
        let blocksHere: Bool
        if case .folder = backends.store { blocksHere = true } else { blocksHere = false }
        let summary: ServerSnapshot.Summary
        do {
            summary = try ServerSnapshot.take(dataDirectory: backends.dataDirectory, to: destination, blocks: blocksHere)
        } catch {
            switch error.kind {
            case .noSource: throw CLIError(error.description, code: ExitCode.noInput)
            case .destinationInUse: throw CLIError(error.description, code: ExitCode.cantCreate)
            case .io: throw CLIError(error.description, code: ExitCode.ioError)
            }
        }
        var line = "Snapshot of \(backends.dataDirectory) in \(destination): the records"
        if blocksHere {
            line += " and \(summary.blocks) block(s), \(summary.bytes) bytes (\(summary.linked) hard-linked, \(summary.blocks - summary.linked) copied)"
            if summary.dropped > 0 { line += "; \(summary.dropped) unused block(s) left out" }
        } else {
            line += " (the blocks stay in the object store)"
        }
        print(line + ".")
        print("Start a server on it with: vdrive serve --data \(destination)")
        return ExitCode.ok
    }
}
