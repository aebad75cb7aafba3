import Foundation
import Testing
@testable import Backup

@Suite(.tags(.logic)) struct ProgressTests {
    @Test func rateConvergesToTheSteadyRate() {
        var rate = RateEstimator(timeConstant: 10)
        var t = 0.0
        rate.record(bytes: 0, at: t)
        for _ in 0..<600 {  // 60 s at 4 MB/s, reported every 0.1 s
            t += 0.1
            rate.record(bytes: 400_000, at: t)
        }
        let bps = try! #require(rate.bytesPerSecond)
        #expect(abs(bps - 4_000_000) < 40_000)
    }

    @Test func rateIsSmoothedAgainstABurst() {
        var rate = RateEstimator(timeConstant: 10)
        var t = 0.0
        rate.record(bytes: 0, at: t)
        for _ in 0..<100 { t += 1; rate.record(bytes: 1_000_000, at: t) }
        // One second at 10x the rate moves the average by about 1 − e^(−1/10) ≈ 9.5% of the jump.
        t += 1
        rate.record(bytes: 10_000_000, at: t)
        let bps = try! #require(rate.bytesPerSecond)
        #expect(bps > 1_500_000 && bps < 2_200_000)
    }

    @Test func aPauseRestartsTheWindowWithoutCountingIdleTime() {
        var rate = RateEstimator(timeConstant: 10, idleGap: 30)
        rate.record(bytes: 0, at: 0)
        for i in 1...20 { rate.record(bytes: 2_000_000, at: Double(i)) }
        let before = try! #require(rate.bytesPerSecond)
        rate.record(bytes: 2_000_000, at: 500)  // after a long hold: starts a window, no sample
        #expect(rate.bytesPerSecond == before)
        rate.record(bytes: 2_000_000, at: 501)
        #expect(abs(rate.bytesPerSecond! - 2_000_000) < 1)
    }

    @Test func etaWordsFollowTheRoundingRules() {
        var eta = EtaFormatter()
        #expect(eta.text(secondsLeft: 20) == "less than a minute")
        #expect(eta.text(secondsLeft: 50) == "about 1 min")
        #expect(eta.text(secondsLeft: 180) == "about 3 min")
        #expect(eta.text(secondsLeft: 23 * 60) == "about 25 min")
        #expect(eta.text(secondsLeft: 3 * 3600) == "about 3 h")
        #expect(eta.text(secondsLeft: 4 * 86400) == "about 4 days")
    }

    @Test func etaDoesNotFlipBetweenMinutesAndHoursAroundAnHour() {
        var eta = EtaFormatter()
        // An estimate wandering between 55 and 70 minutes, as a real one does.
        let wander: [Double] = [55, 62, 58, 70, 59, 66, 61, 57, 68, 60]
        let fromBelow = wander.map { eta.text(secondsLeft: $0 * 60) }
        #expect(fromBelow.allSatisfy { $0.hasSuffix("min") })

        var fromAbove = EtaFormatter()
        _ = fromAbove.text(secondsLeft: 3 * 3600)
        let texts = wander.map { fromAbove.text(secondsLeft: $0 * 60) }
        #expect(texts.allSatisfy { $0 == "about 1 h" })
        // Well below the band it does switch back.
        #expect(fromAbove.text(secondsLeft: 40 * 60) == "about 40 min")
    }

    @Test func etaFromSyntheticClockFallsSteadily() {
        // 1 GB at a steady 4 MB/s through the estimator: the text only ever goes down.
        var rate = RateEstimator()
        var eta = EtaFormatter()
        var left: Int64 = 1_000_000_000
        var t = 0.0
        rate.record(bytes: 0, at: 0)
        var lastMinutes = Int.max
        while left > 0 {
            t += 0.5
            let sent = min(left, 2_000_000)
            left -= sent
            rate.record(bytes: sent, at: t)
            guard let bps = rate.bytesPerSecond else { continue }
            let text = eta.text(secondsLeft: Double(left) / bps)
            let minutes = text.hasPrefix("about") ? Int(text.split(separator: " ")[1])! : 0
            #expect(minutes <= lastMinutes, "ETA went up: \(text) at t=\(t)")
            lastMinutes = minutes
        }
    }

    @Test func statusLineReadsAsDesigned() {
        let backingUp = BackupStatus(state: .backingUp, itemNumber: 12, itemsTotal: 340, itemsLeft: 329,
                                     bytesLeft: 1_200_000_000, rateBytesPerSecond: 4_100_000, etaText: "about 3 min")
        #expect(backingUp.line == "Backing up 12 of 340 · 1.2 GB left · 4.1 MB/s · about 3 min")
        let waiting = BackupStatus(state: .waiting, itemsLeft: 3, bytesLeft: 9_000_000, waitingReason: "Paused")
        #expect(waiting.line == "Paused · 3 items (9.0 MB) left")
        let idle = BackupStatus(state: .idle, itemsFailed: 2)
        #expect(idle.line == "Not everything is backed up · 2 failed (vdrive backup retry)")
        var counted = BackupStatus(state: .idle)
        (counted.backedUpFiles, counted.backedUpBytes) = (1_234, 18_200_000_000)
        #expect(counted.line == "Up to date · 1,234 photos and videos, 18.2 GB")
        counted.backedUpFiles = 0
        #expect(counted.line == "Up to date · nothing backed up yet")
        #expect(BackupStatus(state: .off).line == "Camera backup is off")
    }

    @Test func statusJSONHasTheSameFields() throws {
        let status = BackupStatus(state: .backingUp, itemNumber: 1, itemsTotal: 2, itemsLeft: 2, bytesLeft: 10,
                                  rateBytesPerSecond: 5, etaSeconds: 2, etaText: "less than a minute", cursor: 7)
        let data = status.json()
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(object["state"] as? String == "backing-up")
        #expect(object["etaText"] as? String == "less than a minute")
        #expect(try BackupStatus.decode(data) == status)
    }

    @Test func byteCounts() {
        #expect(ByteCountText.format(999) == "999 B")
        #expect(ByteCountText.format(1_000) == "1.0 KB")
        #expect(ByteCountText.format(1_234_567) == "1.2 MB")
        #expect(ByteCountText.format(150_000_000) == "150 MB")
    }
}
