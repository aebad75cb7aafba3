// The `vdrive` command: parses the verb and hands the rest to that verb's file.
// Exit codes follow sysexits.h (see ExitCode.swift).
#if canImport(Glibc)
import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
exit(CommandLineMain.run(arguments))
