#if canImport(Glibc)
import Glibc
#endif

/// A smoothed transfer rate: an exponentially weighted moving average of bytes/second.
///
/// Bytes are accumulated and folded into the average at most every `minimumInterval`
/// seconds, with a weight that depends on the time elapsed (1 − e^(−Δt/τ)), so the
/// average does not care how often the uploader reports. A gap longer than `idleGap`
/// (a hold, a backoff) restarts the sampling without forgetting the last rate.
public struct RateEstimator: Sendable {
    public var timeConstant: Double
    public var minimumInterval: Double
    public var idleGap: Double
    public private(set) var bytesPerSecond: Double?
    private var windowStart: Double?
    private var windowBytes: Int64 = 0

    public init(timeConstant: Double = 10, minimumInterval: Double = 0.5, idleGap: Double = 30) {
        self.timeConstant = timeConstant
        self.minimumInterval = minimumInterval
        self.idleGap = idleGap
    }

    /// `bytes` went out; `time` is a monotonic clock reading.
    public mutating func record(bytes: Int64, at time: Double) {
        guard let start = windowStart, time - start <= idleGap else {
            // First bytes, or after a pause: start measuring from now. These bytes took an
            // unknown time to send, so they do not count.
            windowStart = time
            windowBytes = 0
            return
        }
        windowBytes += bytes
        let elapsed = time - start
        guard elapsed >= minimumInterval else { return }
        let sample = Double(windowBytes) / elapsed
        if let current = bytesPerSecond {
            let weight = 1 - exp(-elapsed / timeConstant)
            bytesPerSecond = current + weight * (sample - current)
        } else {
            bytesPerSecond = sample
        }
        windowStart = time
        windowBytes = 0
    }

    /// Sending stopped (a hold, idle): the next bytes start a new window.
    public mutating func pause() {
        windowStart = nil
        windowBytes = 0
    }
}
