import Foundation
import Crypto
import Storage
@testable import Backup

/// A fake server whose whole state is a folder, so it outlives a client killed with
/// SIGKILL: `blocks/<hash>` complete blocks, `uploads/<hash>` the bytes of a block
/// received so far (appended as they arrive, as a tus server streams a PATCH body to
/// disk) with `uploads/<hash>.length`, `contents/<hash>` one line per block digest of a
/// recorded content, and `received.log`, one line per piece of PATCH body, written
/// before the piece is stored (a kill in between over-counts: the re-send figure is
/// never flattered).
struct DirectoryTransport: BackupTransport {
    let root: String
    /// Sleep per 64 KiB piece, so a test can kill the client mid-upload.
    let pieceDelayMicroseconds: UInt32

    init(root: String, pieceDelayMicroseconds: UInt32 = 0) throws {
        self.root = root
        self.pieceDelayMicroseconds = pieceDelayMicroseconds
        for folder in ["blocks", "uploads", "contents"] { try FileIO.makeDirectories(root + "/" + folder) }
    }

    func blockPath(_ hash: SHA256Digest) -> String { root + "/blocks/" + hash.hex }
    func uploadPath(_ hash: SHA256Digest) -> String { root + "/uploads/" + hash.hex }
    func contentPath(_ hash: SHA256Digest) -> String { root + "/contents/" + hash.hex }

    /// Bytes of PATCH bodies received over all runs, by any process.
    var bytesReceived: Int64 {
        let text = (try? String(contentsOfFile: root + "/received.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").reduce(0) { $0 + (Int64($1) ?? 0) }
    }

    /// A recorded content's bytes, assembled from its blocks.
    func content(_ hash: SHA256Digest, size: Int64) throws -> [UInt8]? {
        guard let text = try? String(contentsOfFile: contentPath(hash), encoding: .utf8) else { return nil }
        var out: [UInt8] = []
        for (index, line) in text.split(separator: "\n").enumerated() {
            let digest = try #require(SHA256Digest(hex: String(line)))
            let length = Blocks.length(ofBlock: index, fileSize: size)
            if Blocks.isZero(digest, length: length) {
                out += [UInt8](repeating: 0, count: length)
            } else {
                out += try #require(FileManager.default.contents(atPath: blockPath(digest)))
            }
        }
        return out
    }

    func presentContents(_ hashes: [SHA256Digest]) throws -> Set<SHA256Digest> {
        Set(hashes.filter { FileIO.exists(contentPath($0)) })
    }

    func createUpload(_ manifest: ContentManifest) throws -> UploadPlan {
        guard manifest.isConsistent else { throw BackupTransportError(.permanent, "400 blocks") }
        if FileIO.exists(contentPath(manifest.content)) { return .present }
        var plan: [BlockUpload] = []
        for (index, hash) in manifest.blocks.enumerated() {
            let length = Int64(Blocks.length(ofBlock: index, fileSize: manifest.size))
            guard !Blocks.isZero(hash, length: Int(length)), !FileIO.exists(blockPath(hash)),
                  !plan.contains(where: { $0.hash == hash }) else { continue }
            if !FileIO.exists(uploadPath(hash)) {
                let fd = try FileIO.open(uploadPath(hash), O_WRONLY | O_CREAT, 0o600)
                FileIO.close(fd)
                try Data(String(length).utf8).write(to: URL(fileURLWithPath: uploadPath(hash) + ".length"))
            }
            let offset = try offset(hash)
            if offset == length {
                // All bytes arrived but the client (this process) died before the check.
                try complete(hash)
                continue
            }
            plan.append(BlockUpload(index: index, hash: hash, length: length, url: "dir://" + hash.hex, offset: offset))
        }
        return .blocks(plan, expiresAt: .infinity)
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
        if end == (try length(hash)) { try complete(hash) }
        return end
    }

    func recordFile(_ record: BackupRecord) throws {
        if FileIO.exists(contentPath(record.hash)) { return }
        let manifest = ContentManifest(content: record.hash, size: record.size, blocks: record.blocks)
        guard manifest.isConsistent else { throw BackupTransportError(.permanent, "400 blocks") }
        let missing = record.blocks.enumerated().filter { index, hash in
            !Blocks.isZero(hash, length: Blocks.length(ofBlock: index, fileSize: record.size)) && !FileIO.exists(blockPath(hash))
        }
        guard missing.isEmpty else { throw BackupTransportError(.missingBlocks, "409 missing_blocks") }
        try Data(record.blocks.map { $0.hex + "\n" }.joined().utf8).write(to: URL(fileURLWithPath: contentPath(record.hash)))
    }

    func watermark() throws -> BackupWatermark? { nil }
    func setWatermark(_ watermark: BackupWatermark) throws {}

    /// The whole block is here: keep it under its name if it hashes to it, else drop it.
    private func complete(_ hash: SHA256Digest) throws {
        let check = try FileIO.open(uploadPath(hash), O_RDONLY)
        let actual = try BlobStore.hash(fd: check)
        FileIO.close(check)
        try? FileIO.unlink(uploadPath(hash) + ".length")
        guard actual == hash else {
            try? FileIO.unlink(uploadPath(hash))
            throw BackupTransportError(.checksumMismatch, "460 block hash")
        }
        try FileIO.rename(uploadPath(hash), blockPath(hash))
    }

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

import Testing
