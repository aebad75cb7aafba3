/// Turns "seconds left" into words that do not flicker.
///
/// Rules: under 45 s "less than a minute"; minutes are whole, and rounded to 5 under an
/// hour once past 10; hours are whole (rounded) under two days, then days. Between
/// minutes and hours there is hysteresis: we switch to hours only above 75 min and back
/// to minutes only below 50 min, so an estimate wandering around 60 min stays in one
/// unit ("about 60 min" or "about 1 h") instead of flipping on each update.
public struct EtaFormatter: Sendable {
    private var showingHours = false

    public init() {}

    public mutating func text(secondsLeft: Double) -> String {
        let minutes = secondsLeft / 60
        if showingHours { if minutes < 50 { showingHours = false } }
        else if minutes > 75 { showingHours = true }

        if secondsLeft < 45 && !showingHours { return "less than a minute" }
        if !showingHours {
            var whole = max(1, Int(minutes.rounded()))
            if whole > 10 { whole = Int((Double(whole) / 5).rounded()) * 5 }
            return "about \(whole) min"
        }
        let hours = minutes / 60
        if hours < 48 { return "about \(max(1, Int(hours.rounded()))) h" }
        let days = Int((hours / 24).rounded())
        return "about \(days) days"
    }
}
