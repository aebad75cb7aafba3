import Foundation
import Crypto
import Storage
@testable import Backup

/// A fake server whose whole state is a folder, so it outlives a client killed with
/// SIGKILL: `blobs/<hash>` complete blobs, `uploads/<hash>` the bytes received so far
/// (appended as they arrive, as a tus server streams a PATCH body to disk), and
/// `received.log`, one line per piece of PATCH body, written before the piece is stored
/// (a kill in between over-counts: the re-send figure is never flattered).
struct DirectoryTransport: BackupTransport {
    let root: String
    /// Sleep per 64 KiB piece, so a test can kill the client mid-upload.
    let pieceDelayMicroseconds: UInt32

    init(root: String, pieceDelayMicroseconds: UInt32 = 0) throws {
        self.root = root
        self.pieceDelayMicroseconds = pieceDelayMicroseconds
        try FileIO.makeDirectories(root + "/blobs")
        try FileIO.makeDirectories(root + "/uploads")
    }

    func blobPath(_ hash: SHA256Digest) -> String { root + "/blobs/" + hash.hex }
    func uploadPath(_ hash: SHA256Digest) -> String { root + "/uploads/" + hash.hex }

    /// Bytes of PATCH bodies received over all runs, by any process.
    var bytesReceived: Int64 {
        let text = (try? String(contentsOfFile: root + "/received.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").reduce(0) { $0 + (Int64($1) ?? 0) }
    }

    func presentHashes(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        Set(hashes.filter { FileIO.exists(blobPath($0)) })
    }

    func createUpload(hash: SHA256Digest, size: Int64) throws -> UploadTicket {
        if FileIO.exists(blobPath(hash)) { return .present }
        let fd = try FileIO.open(uploadPath(hash), O_WRONLY | O_CREAT, 0o600)
        FileIO.close(fd)
        try Data(String(size).utf8).write(to: URL(fileURLWithPath: uploadPath(hash) + ".length"))
        return .upload(url: "dir://" + hash.hex, offset: try offset(hash), expiresAt: .infinity)
    }

    func uploadOffset(url: String) throws -> Int64 { try offset(try hash(of: url)) }

    func patch(url: String, offset: Int64, chunk: UnsafeRawBufferPointer, chunkSHA256: SHA256Digest,
               progress: (Int64) -> Bool) throws -> Int64 {
        let hash = try hash(of: url)
        let current = try self.offset(hash)
        guard offset == current else {
            throw BackupTransportError(.offsetConflict(serverOffset: current), "409 offset \(current)")
        }
        let chunkHasher = SHA256Hasher()
        chunkHasher.update(chunk)
        guard chunkHasher.finish() == chunkSHA256 else { throw BackupTransportError(.checksumMismatch, "460") }
        let fd = try FileIO.open(uploadPath(hash), O_WRONLY)
        defer { FileIO.close(fd) }
        let log = try FileIO.open(root + "/received.log", O_WRONLY | O_CREAT | O_APPEND, 0o600)
        defer { FileIO.close(log) }
        var done = 0
        while done < chunk.count {
            let piece = min(64 * 1024, chunk.count - done)
            if pieceDelayMicroseconds > 0 { usleep(pieceDelayMicroseconds) }
            try Array("\(piece)\n".utf8).withUnsafeBytes { try FileIO.pwrite(log, $0, at: 0) }
            try FileIO.pwrite(fd, UnsafeRawBufferPointer(rebasing: chunk[done..<(done + piece)]), at: offset + Int64(done))
            done += piece
            if !progress(Int64(done)) { throw BackupTransportError(.cancelled, "cancelled") }
        }
        let end = offset + Int64(chunk.count)
        if end == (try length(hash)) {
            let check = try FileIO.open(uploadPath(hash), O_RDONLY)
            let actual = try BlobStore.hash(fd: check)
            FileIO.close(check)
            guard actual == hash else { throw BackupTransportError(.checksumMismatch, "460 upload hash") }
            try FileIO.rename(uploadPath(hash), blobPath(hash))
            try? FileIO.unlink(uploadPath(hash) + ".length")
        }
        return end
    }

    func recordFile(_ record: FileRecord) throws {}
    func watermark() throws -> BackupWatermark? { nil }
    func setWatermark(_ watermark: BackupWatermark) throws {}

    private func hash(of url: String) throws -> SHA256Digest {
        guard let hash = SHA256Digest(hex: String(url.dropFirst("dir://".count))) else {
            throw BackupTransportError(.notFound, "404 \(url)")
        }
        return hash
    }

    private func offset(_ hash: SHA256Digest) throws -> Int64 {
        guard let st = try? FileIO.status(uploadPath(hash)) else { throw BackupTransportError(.notFound, "404 upload") }
        return Int64(st.st_size)
    }

    private func length(_ hash: SHA256Digest) throws -> Int64 {
        let text = try String(contentsOfFile: uploadPath(hash) + ".length", encoding: .utf8)
        return Int64(text) ?? -1
    }
}
