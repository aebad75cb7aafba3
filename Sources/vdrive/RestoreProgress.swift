import Backup
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The progress line of `vdrive restore` on a terminal (stderr), redrawn in place at
/// most five times a second:
/// `[########------------] 40% · 12 of 30 files · 48.0 MB of 120 MB · 41 MB/s · about 2 min`.
/// In a pipe it draws nothing: scripts get the notes (holds, failures) and the summary.
/// Not thread-safe by itself: `RestoreReport` owns it under a lock.
struct RestoreProgress {
    let enabled: Bool
    let totalFiles: Int
    let totalBytes: Int64
    private(set) var filesDone = 0
    /// Bytes settled: fetched, kept from a killed run, holes, files already there or failed.
    private(set) var bytesDone: Int64 = 0
    private var rate = RateEstimator(timeConstant: 5, minimumInterval: 0.5)
    private var eta = EtaFormatter()
    private var lastDraw = 0.0
    private var drawn = false

    init(totalFiles: Int, totalBytes: Int64, enabled: Bool = isatty(2) == 1) {
        self.totalFiles = totalFiles; self.totalBytes = totalBytes; self.enabled = enabled
    }

    /// `bytes` more are settled; `fetched` says they came over the network (the rate and
    /// the time left count only those).
    mutating func add(_ bytes: Int64, fetched: Bool) {
        bytesDone += bytes
        if fetched { rate.record(bytes: bytes, at: Self.now()) }
        draw(force: false)
    }

    /// A file is finished (restored, already there, or failed).
    mutating func fileFinished() {
        filesDone += 1
        draw(force: filesDone == totalFiles)
    }

    /// A line of its own on stderr (a hold, a failure), in a pipe too; the progress
    /// line is cleared first and redrawn after.
    mutating func note(_ line: String) {
        Self.write((drawn ? "\r\u{1B}[2K" : "") + line + "\n")
        drawn = false
        draw(force: true)
    }

    mutating func draw(force: Bool) {
        guard enabled else { return }
        let now = Self.now()
        guard force || now - lastDraw >= 0.2 else { return }
        lastDraw = now
        let done = min(totalBytes, bytesDone)
        let fraction = totalBytes > 0 ? Double(done) / Double(totalBytes) : Double(filesDone) / Double(max(totalFiles, 1))
        let width = 20
        let filled = Int((fraction * Double(width)).rounded(.down))
        var line = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled) + "] "
            + "\(Int((fraction * 100).rounded(.down)))% · \(filesDone) of \(totalFiles) files · "
            + "\(ByteCountText.format(done)) of \(ByteCountText.format(totalBytes))"
        if let r = rate.bytesPerSecond, r > 0 {
            line += " · " + ByteCountText.rate(r) + " · " + eta.text(secondsLeft: Double(totalBytes - done) / r)
        }
        Self.write("\r\u{1B}[2K" + line)
        drawn = true
    }

    /// Ends the line so later output starts on its own.
    mutating func close() {
        if drawn { Self.write("\n") }
        drawn = false
    }

    private static func write(_ text: String) {
        var text = text
        text.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }

    private static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
