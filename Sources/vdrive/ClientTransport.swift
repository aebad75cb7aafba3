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
            let uploads = tickets.map { BlockUpload(index: $0.index, hash: $0.hash, length: $0.length, url: $0.url, offset: $0.offset) }
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

    func recordFile(_ record: Backup.FileRecord) throws {
        let wire = Protocol.FileRecord(path: record.path, hash: record.hash.hex, size: record.size, blocks: record.blocks.map(\.hex),
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
        case .unreachable, .timedOut, .invalidResponse, .localIO: return BackupTransportError(.transient, message)
        case .http(let status, _):
            return BackupTransportError(status >= 500 || status == 408 || status == 429 ? .transient : .permanent, message)
        }
    }
}

/// Capture dates travel as Unix seconds on the wire and as "YYYY-MM-DDTHH:MM:SS" in the
/// queue (EXIF has no time zone: the camera's local time is carried as if it were UTC,
/// so the date a user sees is the date the camera showed).
enum CaptureDateText {
    static func seconds(_ text: String) -> Int64? {
        let f = formatter()
        return f.date(from: text).map { Int64($0.timeIntervalSince1970) }
    }

    static func text(_ seconds: Int64) -> String {
        formatter().string(from: Date(timeIntervalSince1970: Double(seconds)))
    }

    private static func formatter() -> DateFormatter {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd'T'HH:mm:ss"
        return f
    }
}
