import Foundation
import Testing
@testable import Backup

@Suite(.tags(.logic)) struct CaptureDateTests {
    /// The dates listed in Fixtures/README.md (EXIF DateTimeOriginal).
    @Test(arguments: [
        ("DSC_1999.jpg", "2015-03-01T12:00:00"),
        ("IMG_0001.jpg", "2026-11-28T09:15:02"),
        ("IMG_0001_copy.jpg", "2026-11-28T09:15:02"),
        ("IMG_0002.jpg", "2026-11-28T09:15:40"),
        ("IMG_0003.jpg", "2024-07-14T18:02:11"),
        ("scan_2001.jpg", "2001-01-01T08:00:00"),
        ("IMG_0100.heic", "2025-12-24T20:30:00"),
    ])
    func exifDatesOfFixturePhotos(_ name: String, _ expected: String) throws {
        let bytes = try Fixtures.bytes(name)
        let prefix = Array(bytes.prefix(CaptureDate.prefixLength))
        let date = prefix.withUnsafeBytes { CaptureDate.from(prefix: $0, mtime: 0) }
        #expect(date == CaptureDate(value: expected, source: .exif))
    }

    @Test(arguments: ["no_exif.jpg", "screenshot.png"])
    func filesWithoutExifFallBackToMtime(_ name: String) throws {
        let bytes = try Fixtures.bytes(name)
        let date = bytes.withUnsafeBytes { CaptureDate.from(prefix: $0, mtime: 978_307_200) }  // 2001-01-01 00:00 UTC
        #expect(date == CaptureDate(value: "2001-01-01T00:00:00Z", source: .mtime))
    }

    @Test func truncatedAndHostileInputNeverTraps() throws {
        let bytes = try Fixtures.bytes("IMG_0003.jpg")
        for length in [0, 1, 2, 3, 4, 10, 20, 100, 500, 1000, 4000] {
            let prefix = Array(bytes.prefix(length))
            _ = prefix.withUnsafeBytes { ExifReader.dateTimeOriginal(fileStart: $0) }
        }
        let heic = try Fixtures.bytes("IMG_0100.heic")
        for length in stride(from: 0, to: 600, by: 7) {
            let prefix = Array(heic.prefix(length))
            _ = prefix.withUnsafeBytes { ExifReader.dateTimeOriginal(fileStart: $0) }
        }
        // Every offset pointing past the end, and random junk.
        var junk = [UInt8](repeating: 0xFF, count: 64)
        junk[0] = 0xFF; junk[1] = 0xD8
        #expect(junk.withUnsafeBytes { ExifReader.dateTimeOriginal(fileStart: $0) } == nil)
        let noise = testBytes(70_000, seed: 99)
        #expect(noise.withUnsafeBytes { ExifReader.dateTimeOriginal(fileStart: $0) } == nil)
    }

    @Test func blankCameraDatesAreIgnored() {
        #expect(ExifReader.normalise("0000:00:00 00:00:00") == nil)
        #expect(ExifReader.normalise("    :  :     :  :  ") == nil)
        #expect(ExifReader.normalise("2020:02:29 23:59:59") == "2020-02-29T23:59:59")
    }
}
