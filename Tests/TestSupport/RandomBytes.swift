/// Test data shared by the test targets and the benchmarks.
import Foundation

/// Pseudo-random bytes (xorshift), the same for the same seed.
public func randomBytes(_ size: Int, seed: UInt64) -> [UInt8] {
    var state = seed &* 0x9E3779B97F4A7C15 | 1
    var bytes = [UInt8](repeating: 0, count: size)
    bytes.withUnsafeMutableBytes { raw in
        let words = raw.bindMemory(to: UInt64.self)
        for i in 0..<words.count {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            words[i] = state
        }
        for i in (words.count * 8)..<size { state ^= state << 13; state ^= state >> 7; state ^= state << 17; raw[i] = UInt8(truncatingIfNeeded: state) }
    }
    return bytes
}

/// A random test's seed: `VDRIVE_TEST_SEED` when it is set (to replay one a run printed;
/// select the test with `--filter`), else a new one. The caller prints it.
public func testSeed() -> UInt64 {
    ProcessInfo.processInfo.environment["VDRIVE_TEST_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
}

/// SplitMix64: small, seedable, the same sequence on every platform (seeded tests print
/// their seed, so a failure replays).
public struct SeededGenerator: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
