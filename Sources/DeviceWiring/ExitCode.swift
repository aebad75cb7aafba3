#if canImport(Glibc)
import Glibc
#endif
import Storage

/// Exit codes from sysexits.h, so scripts and systemd can tell failures apart.
public enum ExitCode {
    public static let ok: Int32 = 0
    public static let usage: Int32 = 64        // EX_USAGE: wrong arguments
    public static let dataError: Int32 = 65    // EX_DATAERR: input data was bad
    public static let noInput: Int32 = 66      // EX_NOINPUT: a file or folder named is missing or unreadable
    public static let unavailable: Int32 = 69  // EX_UNAVAILABLE: a service (server, FUSE) is not available
    public static let software: Int32 = 70     // EX_SOFTWARE: an internal error
    public static let osError: Int32 = 71      // EX_OSERR: the system refused (fork, mount)
    public static let cantCreate: Int32 = 73   // EX_CANTCREAT: cannot create an output file or folder
    public static let ioError: Int32 = 74      // EX_IOERR: an I/O error
    public static let tempFail: Int32 = 75     // EX_TEMPFAIL: try again later
    public static let noPermission: Int32 = 77 // EX_NOPERM
    public static let config: Int32 = 78       // EX_CONFIG: configuration or state is unusable
}

/// A failure reported to the user as one line on stderr and an exit code.
public struct CLIError: Error {
    public let message: String
    public let code: Int32
    public init(_ message: String, code: Int32) { self.message = message; self.code = code }
    public static func usage(_ message: String) -> CLIError { CLIError(message, code: ExitCode.usage) }
}

public func printError(_ message: String) {
    LogLine.write("vdrive: " + message)
}
