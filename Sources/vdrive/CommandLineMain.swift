import DeviceWiring

/// A verb of the command line: its name, a one-line summary, its help text and its body.
struct Verb: Sendable {
    let name: String
    let summary: String
    let help: String
    let run: @Sendable ([String]) throws -> Int32
}

enum CommandLineMain {
    /// Every verb. Each lives in its own file (MountCommand.swift, ServeCommand.swift, ...).
    static var verbs: [Verb] {
        [
            MountCommand.verb,
            MountCommand.unmountVerb,
            ServeCommand.verb,
            TaskCommand.verb,
            RestoreCommand.verb,
            CheckCommand.verb,
            TrashCommand.verb,
            VersionsCommand.verb,
            PinCommand.pin,
            PinCommand.unpin,
        ] + backupVerbs
    }

    /// The backup verbs (Backup target); they work on the settings file and the state folder.
    static var backupVerbs: [Verb] { [SettingsCommand.verb, PauseCommand.pause, PauseCommand.resume,
                                      StatusCommand.verb, BackupCommand.verb] }

    static var overview: String {
        var text = """
        vdrive: a virtual drive with camera-roll backup

        Usage: vdrive <verb> [options]

        Verbs:

        """
        for verb in verbs { text += "  " + verb.name.padding(12) + verb.summary + "\n" }
        text += "\nRun 'vdrive <verb> --help' for a verb's options.\n"
        return text
    }

    static func run(_ arguments: [String]) -> Int32 {
        guard let first = arguments.first else {
            print(overview, terminator: "")
            return ExitCode.usage
        }
        if first == "--help" || first == "-h" || first == "help" {
            print(overview, terminator: "")
            return ExitCode.ok
        }
        if first == "--version" {
            print("vdrive \(versionString)")
            return ExitCode.ok
        }
        guard let verb = verbs.first(where: { $0.name == first }) else {
            printError("unknown verb '\(first)'; run 'vdrive --help' for the list")
            return ExitCode.usage
        }
        let rest = Array(arguments.dropFirst())
        if rest.contains("--help") || rest.contains("-h") {
            print(verb.help, terminator: verb.help.hasSuffix("\n") ? "" : "\n")
            return ExitCode.ok
        }
        do {
            return try verb.run(rest)
        } catch let error as CLIError {
            printError(error.message)
            return error.code
        } catch {
            printError("\(error)")
            return ExitCode.software
        }
    }

    static let versionString = "0.1.0"
}

extension String {
    func padding(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}

/// A small option parser: `--name value`, `--name=value`, flags, and positionals.
struct Options {
    private(set) var positionals: [String] = []
    private var values: [String: String] = [:]
    private var flags: Set<String> = []

    /// `valued` names the options that take a value; `flags` those that do not.
    init(_ arguments: [String], valued: Set<String>, flags knownFlags: Set<String>) throws {
        var i = 0
        while i < arguments.count {
            let arg = arguments[i]
            if arg == "--" {
                positionals += arguments[(i + 1)...]
                break
            }
            if arg.hasPrefix("-") && arg != "-" {
                var name = arg
                var inline: String?
                if let eq = arg.firstIndex(of: "=") {
                    name = String(arg[..<eq])
                    inline = String(arg[arg.index(after: eq)...])
                }
                if valued.contains(name) {
                    if let inline { values[name] = inline }
                    else {
                        guard i + 1 < arguments.count else { throw CLIError.usage("option \(name) needs a value") }
                        values[name] = arguments[i + 1]
                        i += 1
                    }
                } else if knownFlags.contains(name) && inline == nil {
                    flags.insert(name)
                } else {
                    throw CLIError.usage("unknown option '\(arg)'; see --help")
                }
            } else {
                positionals.append(arg)
            }
            i += 1
        }
    }

    func value(_ name: String) -> String? { values[name] }
    func has(_ name: String) -> Bool { flags.contains(name) }
}
