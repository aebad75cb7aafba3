/// How long to wait before the next attempt after a transient error: capped exponential
/// backoff with "equal jitter" (half fixed, half random), so many devices coming back
/// after a server outage do not retry in lockstep, yet none waits much less than planned.
public struct RetryPolicy: Sendable {
    public var base: Double = 5
    public var cap: Double = 15 * 60
    /// After this many uploads the server did not confirm under the right hash, the item
    /// fails: something is wrong that retrying will not fix (a broken proxy, a bad disk).
    public var maxIntegrityFailures = 3

    public init(base: Double = 5, cap: Double = 15 * 60, maxIntegrityFailures: Int = 3) {
        self.base = base; self.cap = cap; self.maxIntegrityFailures = maxIntegrityFailures
    }

    /// The delay before attempt `attempt + 1` (attempt counts from 0); `random` in [0, 1).
    public func delay(afterAttempt attempt: Int, random: Double) -> Double {
        let exponent = Double(min(attempt, 30))
        let ceiling = min(cap, base * pow2(exponent))
        return ceiling / 2 + ceiling / 2 * min(max(random, 0), 1)
    }

    private func pow2(_ e: Double) -> Double {
        var v = 1.0
        for _ in 0..<Int(e) { v *= 2 }
        return v
    }
}
