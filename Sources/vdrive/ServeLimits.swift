import Server
import DeviceWiring

/// The `vdrive serve` options that set `ServerLimits` (what one client can make the
/// server hold; Docs/operations.md, "Limits"): each a whole number or a size, checked
/// against the ranges the server accepts, exit 64 with the option and value at fault.
enum ServeLimits {
    static let valued: Set<String> = ["--max-open-hashers", "--max-uploads-per-plan", "--max-uploads-per-device", "--body-budget"]

    static let help = """
      --max-open-hashers N     tus uploads whose hasher (a thread, an open file) is kept
                               between PATCHes (default: 64; 1 to 4096)
      --max-uploads-per-plan N block uploads one POST /v1/uploads may start (default: 16384;
                               413 beyond)
      --max-uploads-per-device N
                               uploads in progress per device (default: 65536; 429 beyond)
      --body-budget SIZE       request bodies held in memory, all connections (default: 256M;
                               1M to 1T; 503 Retry-After beyond)
    """

    static func apply(_ options: Options, to limits: inout ServerLimits) throws {
        let counts: [(String, WritableKeyPath<ServerLimits, Int>, ClosedRange<Int>)] = [
            ("--max-open-hashers", \.openUploads, ServerLimits.openUploadsRange),
            ("--max-uploads-per-plan", \.uploadsPerRequest, ServerLimits.uploadsPerRequestRange),
            ("--max-uploads-per-device", \.uploadsPerDevice, ServerLimits.uploadsPerDeviceRange),
        ]
        for (name, path, range) in counts {
            guard let text = options.value(name) else { continue }
            guard let n = Int(text), range.contains(n) else {
                throw CLIError.usage("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), got '\(text)'")
            }
            limits[keyPath: path] = n
        }
        if let text = options.value("--body-budget") {
            let range = ServerLimits.bufferedBytesRange
            guard let bytes = ResidencySettings.parseSize(text), let n = Int(exactly: bytes), range.contains(n) else {
                throw CLIError.usage("--body-budget must be a size from 1M to 1T such as 256M or 2G, got '\(text)'")
            }
            limits.bufferedBytes = n
        }
        if let problem = limits.problem { throw CLIError.usage(problem.prefix(1).uppercased() + problem.dropFirst() + "; see 'vdrive serve --help'") }
    }
}
