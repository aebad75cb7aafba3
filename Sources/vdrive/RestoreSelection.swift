import Foundation
import DeviceWiring
import Protocol

/// Which of a device's backups `vdrive restore` takes: `--since`/`--until` bound the
/// capture date (a record without one is placed by its mtime, as the drive's
/// `Backups/` folders do), both days included.
///
/// Capture dates are the camera's local time carried as if it were UTC (EXIF has no
/// time zone; see CaptureDateText), so days are cut at UTC midnight: `--since
/// 2019-07-01` takes a photo the camera stamped 2019-07-01 00:10, wherever it was taken.
struct RestoreSelection: Equatable {
    /// First second included, Unix seconds.
    var since: Int64?
    /// Last second included, Unix seconds.
    var until: Int64?

    init(since: String?, until: String?) throws {
        self.since = try since.map { try Self.day($0, option: "--since") }
        self.until = try until.map { try Self.day($0, option: "--until") + 86_399 }
        if let s = self.since, let u = self.until, s > u {
            throw CLIError.usage("--since \(since!) is after --until \(until!); nothing would be restored")
        }
    }

    /// The date a record is filtered (and its restored file dated) by.
    static func date(of record: FileRecord) -> Int64 { record.captureDate ?? record.mtime }

    func includes(_ record: FileRecord) -> Bool {
        let date = Self.date(of: record)
        if let since, date < since { return false }
        if let until, date > until { return false }
        return true
    }

    /// Midnight UTC of a `YYYY-MM-DD` day.
    static func day(_ text: String, option: String) throws -> Int64 {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
              let y = Int(parts[0]), let m = Int(parts[1]), let d = Int(parts[2]) else {
            throw CLIError.usage("\(option) takes a day as YYYY-MM-DD (e.g. 2019-07-01), got '\(text)'")
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: y, month: m, day: d)
        guard components.isValidDate(in: calendar), let date = calendar.date(from: components) else {
            throw CLIError.usage("\(option) '\(text)' is not a day of the calendar")
        }
        return Int64(date.timeIntervalSince1970)
    }
}
