/// Byte counts for people, in decimal units as file managers show them: "1.2 GB", "512 KB".
public enum ByteCountText {
    public static func format(_ bytes: Int64) -> String {
        let units = ["B", "KB", "MB", "GB", "TB", "PB"]
        var value = Double(max(bytes, 0))
        var unit = 0
        while value >= 1000 && unit < units.count - 1 { value /= 1000; unit += 1 }
        if unit == 0 { return "\(Int(value)) B" }
        if value >= 100 { return "\(Int(value.rounded())) \(units[unit])" }
        let tenths = (value * 10).rounded() / 10
        let text = tenths == tenths.rounded() ? "\(Int(tenths)).0" : "\(tenths)"
        return "\(text) \(units[unit])"
    }

    public static func rate(_ bytesPerSecond: Double) -> String { format(Int64(bytesPerSecond)) + "/s" }
}
