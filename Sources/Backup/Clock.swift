#if canImport(Glibc)
import Glibc
#endif

/// Wall-clock and monotonic seconds. Every time-dependent type takes its clock as a
/// closure parameter defaulting to these, so tests drive time by hand.
public enum Clock {
    /// Seconds since the epoch (stored in SQLite: it survives restarts, unlike a monotonic clock).
    public static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Seconds on the monotonic clock, for rates and rate limits (never jumps with NTP).
    public static func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
