import Foundation
import DeviceWiring
import Server

/// Space on the server: `vdrive serve gc` (the garbage collection), `vdrive serve
/// usage` (per device and in total), and the options of `vdrive serve` that set the
/// quota and the periodic collection.
enum ServeSpaceCommand {
    /// `vdrive serve` options of this file.
    static let serveOptions: Set<String> = ["--quota", "--gc-interval", "--gc-grace", "--trash-days"]

    static let help = """
      --quota SIZE             the workspace's quota (500G, 2T; powers of 1024): uploads that
                               would take it over get 507; linking held content is free
      --gc-interval DURATION   how often the garbage collection runs (default 6h; 0: never)
      --gc-grace DURATION      what is younger is never collected (default 24h)
      --trash-days N           days a deleted node stays in the workspace's trash (default 30;
                               0: forever); purged with the periodic collection, its contents
                               are then collectable
    """

    /// Applies `--quota`, `--gc-interval`, `--gc-grace` and `--trash-days` to a server's configuration.
    static func apply(_ options: Options, to configuration: inout ServerConfiguration) throws {
        if let quota = try quota(options) { configuration.quota = quota }
        if let text = options.value("--gc-interval") { configuration.gcInterval = try duration(text, option: "--gc-interval") }
        if let text = options.value("--gc-grace") { configuration.gcGrace = try duration(text, option: "--gc-grace") }
        if let text = options.value("--trash-days") {
            // Bounded so that the days, in seconds, fit an Int64.
            guard let days = Int64(text), days >= 0, days <= Int64.max / 86_400 else {
                throw CLIError.usage("--trash-days must be a whole number of days, 0 (keep the trash forever) or more, got '\(text)'")
            }
            configuration.trashDays = days
        }
    }

    /// `--quota SIZE`, nil when not given.
    static func quota(_ options: Options) throws -> Int64? {
        guard let text = options.value("--quota") else { return nil }
        guard let bytes = ResidencySettings.parseSize(text), bytes > 0 else {
            throw CLIError.usage("--quota must be a size such as 500G or 2T, got '\(text)'")
        }
        return bytes
    }

    /// "24h", "30m", "90s", "7d", or plain seconds.
    static func duration(_ text: String, option: String) throws -> Int64 {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var digits = Substring(text), unit: Int64 = 1
        if let last = digits.last, let u = units[last] { unit = u; digits = digits.dropLast() }
        guard let n = Int64(digits), n >= 0, n <= Int64.max / unit else {
            throw CLIError.usage("\(option) must be a duration such as 24h, 30m, 90s or 7d (0 for none), got '\(text)'")
        }
        return n * unit
    }

    /// `vdrive serve gc [--dry-run] [--grace DURATION]`.
    static func gc(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued.union(["--grace"]), flags: ["--dry-run"])
        if let extra = options.positionals.first { throw CLIError.usage("unexpected argument '\(extra)'; usage: vdrive serve gc [--dry-run] [--grace DURATION]") }
        let grace = try options.value("--grace").map { try duration($0, option: "--grace") } ?? ServerConfiguration(dataDirectory: "").gcGrace
        let collector = try open(options)
        let report: SpaceCollector.Report
        do {
            report = try collector.collect(grace: grace, dryRun: options.has("--dry-run"))
        } catch let busy as SpaceCollector.Busy {
            throw CLIError(busy.description, code: ExitCode.tempFail)
        } catch {
            throw CLIError("garbage collection failed: \(error)", code: ExitCode.unavailable)
        }
        let verb = report.dryRun ? "would remove" : "removed"
        print("\(verb) \(report.contents) content(s) no version records and \(report.blocks) block(s) nothing names, \(SpaceUsage.text(report.bytes)) (grace \(grace) s)")
        if report.objects > 0 {
            print("\(verb) \(report.objects) object(s) in the bucket no block names (PUT by a device, never verified), \(SpaceUsage.text(report.objectBytes))")
        }
        if report.finished > 0 { print("finished \(report.finished) removal(s) an interrupted run left") }
        return ExitCode.ok
    }

    /// `vdrive serve usage [--json] [--grace DURATION]`.
    static func usage(_ arguments: [String]) throws -> Int32 {
        let options = try Options(arguments, valued: ServeBackends.valued.union(["--grace"]), flags: ["--json"])
        if let extra = options.positionals.first { throw CLIError.usage("unexpected argument '\(extra)'; usage: vdrive serve usage [--json]") }
        let grace = try options.value("--grace").map { try duration($0, option: "--grace") } ?? ServerConfiguration(dataDirectory: "").gcGrace
        let collector = try open(options)
        let usage: SpaceUsage
        do { usage = try SpaceUsage.measure(collector, grace: grace, quota: try collector.recordedQuota()) } catch {
            throw CLIError("could not read the usage: \(error)", code: ExitCode.unavailable)
        }
        if options.has("--json") {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            print(String(decoding: try encoder.encode(usage), as: UTF8.self))
            return ExitCode.ok
        }
        print("device\tfiles\tversions\treferenced\tunique")
        for d in usage.devices {
            print("\(d.name)\t\(d.files)\t\(d.versions)\t\(SpaceUsage.text(d.referencedBytes))\t\(SpaceUsage.text(d.uniqueBytes))")
        }
        print("stored: \(usage.blocks) block(s), \(SpaceUsage.text(usage.storedBytes))" + (usage.quota.map { " of a \(SpaceUsage.text($0)) quota" } ?? " (no quota)"))
        print("garbage collection would free now: \(usage.collectableBlocks) block(s), \(SpaceUsage.text(usage.collectableBytes)) (grace \(grace) s)")
        return ExitCode.ok
    }

    private static func open(_ options: Options) throws -> SpaceCollector {
        let configuration = try ServeBackends(options).configuration
        do { return try SpaceCollector(configuration) } catch { throw ServeCommand.cliError(error) }
    }
}
