import Foundation
import Backup
import Client
import Crypto
import Protocol

/// The backup engine's `BackupTransport` over the libcurl `WorkspaceClient`: the one
/// place where HTTP outcomes become the queue's error kinds (Docs/backup.md).
struct ClientTransport: BackupTransport {
    let client: WorkspaceClient

    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        try mapped { try client.presentContents(hashes) }
    }

    func createUpload(_ manifest: ContentManifest) throws -> Backup.UploadPlan {
        switch try mapped({ try client.createUpload(content: manifest.content, size: manifest.size, blocks: manifest.blocks) }) {
        case .present:
            return .present
        case .blocks(let tickets, let expiresAt):
            let uploads = tickets.map { ticket -> BlockUpload in
                let kind: BlockUpload.Kind
                switch ticket.kind {
                case .tus: kind = .tus
                case .s3(let headers): kind = .s3(headers: headers)
                }
                return BlockUpload(index: ticket.index, hash: ticket.hash, length: ticket.length, url: ticket.url, offset: ticket.offset, kind: kind)
            }
            return .blocks(uploads, expiresAt: Double(expiresAt))
        }
    }

    func uploadOffset(url: String) throws -> Int64 {
        try mapped { try client.uploadOffset(url: url) }
    }

    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64 {
        try withoutActuallyEscaping(progress) { progress in
            try mapped { try client.patch(url: url, offset: offset, bytes: chunk, checksum: chunkSHA256, progress: progress) }
        }
    }

    func put(_ block: BlockUpload, chunk: UnsafeRawBufferPointer, progress: (Int64) -> Bool) throws {
        guard case .s3(let headers) = block.kind else {
            throw BackupTransportError(.permanent, "block \(block.index) is a tus upload, not an object store PUT")
        }
        try withoutActuallyEscaping(progress) { progress in
            try mapped { try client.putBlock(url: block.url, hash: block.hash, headers: headers, bytes: chunk, progress: progress) }
        }
    }

    func recordFile(_ record: BackupRecord) throws {
        let wire = FileRecord(path: record.path, hash: record.hash.hex, size: record.size, blocks: record.blocks.map(\.hex),
                                       captureDate: record.captureDate.flatMap(CaptureDateText.seconds),
                                       mtime: record.mtime, deviceSequence: record.changeSequence)
        _ = try mapped { try client.recordFile(wire) }
    }

    func watermark() throws -> BackupWatermark? {
        guard let w = try mapped({ try client.watermark() }) else { return nil }
        return BackupWatermark(sequence: w.sequence, newestCaptureDate: w.newestCaptureDate.map(CaptureDateText.text))
    }

    func setWatermark(_ watermark: BackupWatermark) throws {
        try mapped {
            try client.setWatermark(Protocol.Watermark(sequence: watermark.sequence,
                                                       newestCaptureDate: watermark.newestCaptureDate.flatMap(CaptureDateText.seconds)))
        }
    }

    private func mapped<T>(_ body: () throws -> T) throws -> T {
        do { return try body() } catch let error as ClientError { throw Self.kind(of: error) }
    }

    static func kind(of error: ClientError) -> BackupTransportError {
        let message = error.description
        switch error {
        case .expired: return BackupTransportError(.expiredURL, message)
        case .notFound: return BackupTransportError(.notFound, message)
        case .offsetConflict(let server?): return BackupTransportError(.offsetConflict(serverOffset: server), message)
        case .offsetConflict(nil): return BackupTransportError(.transient, message)
        case .checksumMismatch, .contentMismatch: return BackupTransportError(.checksumMismatch, message)
        case .missingBlocks: return BackupTransportError(.missingBlocks, message)
        case .cancelled: return BackupTransportError(.cancelled, message)
        case .unreachable, .timedOut, .invalidResponse, .localIO, .insecure: return BackupTransportError(.transient, message)
        case .http(507, _):
            return BackupTransportError(.serverFull, message)
        case .http(let status, _):
            return BackupTransportError(status >= 500 || status == 408 || status == 429 ? .transient : .permanent, message)
        }
    }
}

/// Capture dates travel as Unix seconds on the wire and as "YYYY-MM-DDTHH:MM:SS" in the
/// queue (EXIF has no time zone: the camera's local time is carried as if it were UTC,
/// so the date a user sees is the date the camera showed).
enum CaptureDateText {
    /// "YYYY-MM-DDTHH:MM:SS" read as UTC, nil when it is not that. Parsed by hand: a
    /// `DateFormatter` made per record showed in the mount's profile (ICU setup on the
    /// engine thread for every photo).
    /// A trailing "Z" (the queue writes mtime-derived dates so) is accepted: it says UTC.
    static func seconds(_ text: String) -> Int64? {
        var b = Array(text.utf8)
        if b.count == 20, b[19] == UInt8(ascii: "Z") { b.removeLast() }
        guard b.count == 19, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":") else { return nil }
        func number(_ from: Int, _ count: Int) -> Int32? {
            var n: Int32 = 0
            for c in b[from..<from + count] {
                guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
                n = n * 10 + Int32(c - UInt8(ascii: "0"))
            }
            return n
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var t = tm()
        t.tm_year = year - 1900; t.tm_mon = month - 1; t.tm_mday = day
        t.tm_hour = hour; t.tm_min = minute; t.tm_sec = second
        let seconds = Int64(timegm(&t))
        // timegm normalises out-of-range days (Feb 31 → Mar 3): refuse those, as the formatter did.
        guard t.tm_mday == day, t.tm_mon == month - 1 else { return nil }
        return seconds
    }

    static func text(_ seconds: Int64) -> String {
        var time = time_t(seconds)
        var t = tm()
        gmtime_r(&time, &t)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d", Int(t.tm_year) + 1900, Int(t.tm_mon) + 1, Int(t.tm_mday),
                      Int(t.tm_hour), Int(t.tm_min), Int(t.tm_sec))
    }
}
