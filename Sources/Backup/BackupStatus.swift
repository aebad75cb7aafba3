import Foundation

/// What backup is doing, for `.backup/status`, `status.json` and `vdrive status`.
public struct BackupStatus: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Camera backup is turned off in the settings.
        case off
        /// Nothing left to send.
        case idle
        case backingUp = "backing-up"
        /// Something is left but a hold or a backoff keeps it waiting: see `waitingReason`.
        case waiting
    }

    public var state: State
    /// Items finished since the queue was last empty, plus the one in flight.
    public var itemNumber: Int
    /// Items in this run: finished since the queue was last empty + left.
    public var itemsTotal: Int
    public var itemsLeft: Int
    public var bytesLeft: Int64
    public var itemsFailed: Int
    public var itemsDone: Int
    /// Distinct photos and videos backed up, and their bytes (nil in a status written
    /// before these were counted).
    public var backedUpFiles: Int?
    public var backedUpBytes: Int64?
    public var rateBytesPerSecond: Double?
    public var etaSeconds: Double?
    public var etaText: String?
    public var waitingReason: String?
    public var waitingCode: String?
    public var currentPath: String?
    /// The backup cursor: every camera-roll commit at or below this sequence is done.
    public var cursor: Int64
    /// The engine's last error outside an item (a failed sync, a database error), for
    /// diagnosis in status.json; nil once the same step succeeds again.
    public var lastError: String?
    /// Seconds since the epoch when this was computed.
    public var updatedAt: Double

    public init(state: State, itemNumber: Int = 0, itemsTotal: Int = 0, itemsLeft: Int = 0, bytesLeft: Int64 = 0,
                itemsFailed: Int = 0, itemsDone: Int = 0, rateBytesPerSecond: Double? = nil, etaSeconds: Double? = nil,
                etaText: String? = nil, waitingReason: String? = nil, waitingCode: String? = nil,
                currentPath: String? = nil, cursor: Int64 = 0, updatedAt: Double = 0) {
        self.state = state; self.itemNumber = itemNumber; self.itemsTotal = itemsTotal; self.itemsLeft = itemsLeft
        self.bytesLeft = bytesLeft; self.itemsFailed = itemsFailed; self.itemsDone = itemsDone
        self.rateBytesPerSecond = rateBytesPerSecond; self.etaSeconds = etaSeconds; self.etaText = etaText
        self.waitingReason = waitingReason; self.waitingCode = waitingCode; self.currentPath = currentPath
        self.cursor = cursor; self.updatedAt = updatedAt
    }

    /// One line, as in `.backup/status`:
    /// "Backing up 12 of 340 · 1.2 GB left · 4.1 MB/s · about 3 min".
    public var line: String {
        var parts: [String]
        switch state {
        case .off:
            parts = ["Camera backup is off"]
        case .idle:
            // Nothing left to try is not "up to date" while something failed: a user reads
            // the first words, and a photo that was not backed up must not hide behind them.
            parts = [itemsFailed > 0 ? "Not everything is backed up" : "Up to date"]
            if let files = backedUpFiles, let bytes = backedUpBytes {
                parts.append(files == 0 ? "nothing backed up yet"
                             : "\(Self.grouped(files)) \(files == 1 ? "photo or video" : "photos and videos"), \(ByteCountText.format(bytes))")
            }
        case .backingUp:
            parts = ["Backing up \(itemNumber) of \(itemsTotal)", "\(ByteCountText.format(bytesLeft)) left"]
            if let rate = rateBytesPerSecond, let etaText {
                parts += [ByteCountText.rate(rate), etaText]
            } else {
                parts.append("estimating time left")
            }
        case .waiting:
            parts = [waitingReason ?? "Waiting"]
            if itemsLeft > 0 {
                parts.append("\(itemsLeft) \(itemsLeft == 1 ? "item" : "items") (\(ByteCountText.format(bytesLeft))) left")
            }
        }
        if itemsFailed > 0 { parts.append("\(itemsFailed) failed (vdrive backup retry)") }
        return parts.joined(separator: " · ")
    }

    /// 1234 → "1,234".
    static func grouped(_ n: Int) -> String {
        let digits = Array(String(n))
        var out = ""
        for (i, d) in digits.enumerated() {
            if i > 0 && (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(d)
        }
        return out
    }

    /// The same fields as JSON (`status.json`), keys sorted, one object.
    public func json() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        return (try? encoder.encode(self)) ?? Data("{}".utf8)
    }

    public static func decode(_ data: Data) throws -> BackupStatus {
        try JSONDecoder().decode(BackupStatus.self, from: data)
    }

    /// The fraction sent in this run, for progress bars; nil when unknown.
    public var fractionDone: Double? {
        guard itemsTotal > 0 else { return nil }
        return Double(itemsTotal - itemsLeft) / Double(itemsTotal)
    }
}

/// `<state>/status.json` and `<state>/status`: written atomically by the engine on every
/// change (at most once a second while bytes flow), read by `vdrive status`.
public struct StatusFile: Sendable {
    public let stateFolder: String
    public init(stateFolder: String) { self.stateFolder = stateFolder }

    public var jsonPath: String { stateFolder + "/status.json" }
    public var textPath: String { stateFolder + "/status" }

    public func write(_ status: BackupStatus) throws {
        try AtomicFile.write(status.json(), to: jsonPath, durable: false)
        try AtomicFile.write(Data((status.line + "\n").utf8), to: textPath, durable: false)
    }

    /// The last status written, or nil when there is none yet.
    public func read() throws -> BackupStatus? {
        guard let data = FileManager.default.contents(atPath: jsonPath) else { return nil }
        return try BackupStatus.decode(data)
    }
}
