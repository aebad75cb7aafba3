import Crypto
import Protocol
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// Streams one PATCH body into the upload's staging file at the upload's offset.
/// Nothing is buffered beyond libmicrohttpd's chunk. The offset recorded in the records
/// moves only when the PATCH ends well (checksum matched), or, for a PATCH without
/// Upload-Checksum, also when the client goes away: then the bytes written count.
final class PatchBody: RequestBody {
    private let context: ServerContext
    private let upload: UploadRow
    private let fd: Int32
    private let digest: SHA256Digest
    private var position: Int64
    private let start: Int64
    private let expectedChecksum: [UInt8]?
    private let chunkHasher: SHA256Hasher?
    private var hasher: TrailingHasher?
    private var failure: HTTPResponse?
    private let responseHeaders: [(String, String)]

    init(context: ServerContext, upload: UploadRow, digest: SHA256Digest, fd: Int32, checksum: [UInt8]?, hasher: TrailingHasher?, headers: [(String, String)]) {
        self.context = context
        self.upload = upload
        self.digest = digest
        self.fd = fd
        self.position = upload.received
        self.start = upload.received
        self.expectedChecksum = checksum
        self.chunkHasher = checksum == nil ? nil : SHA256Hasher()
        self.hasher = hasher
        self.responseHeaders = headers
    }

    func receive(_ chunk: UnsafeRawBufferPointer) {
        guard failure == nil else { return }
        if position + Int64(chunk.count) > upload.length {
            failure = .error(413, "body_too_large", "the PATCH carries more than the \(upload.length - start) bytes left of this \(upload.length)-byte upload; the chunk was discarded")
            return
        }
        do {
            try FileIO.pwrite(fd, chunk, at: position)
        } catch {
            failure = ServerContext.failure(error)
            return
        }
        chunkHasher?.update(chunk)
        position += Int64(chunk.count)
    }

    private func headers(offset: Int64) -> [(String, String)] {
        responseHeaders + [(Tus.uploadOffset, String(offset))]
    }

    func finish() -> HTTPResponse {
        defer { FileIO.close(fd) }
        // A failed or discarded PATCH leaves the hasher where it was: it only hashes verified bytes.
        if let failure {
            context.uploads.release(upload.id, hasher: hasher)
            return failure.adding(headers(offset: start))
        }
        // A PATCH that carries a whole block from its first byte (what the uploader sends)
        // was hashed once on the way in: that digest is the block's, so the trailing
        // hasher need not read the block back (one SHA-256 pass per block, not two).
        var wholeBlock: SHA256Digest?
        if let expectedChecksum, let chunkHasher {
            let chunkDigest = chunkHasher.finish()
            guard HMACSHA256.equal(chunkDigest.bytes, expectedChecksum) else {
                context.uploads.release(upload.id, hasher: hasher)
                return HTTPResponse.error(Tus.checksumMismatchStatus, "checksum_mismatch",
                                          "the chunk's SHA-256 does not match Upload-Checksum; the chunk was discarded, send it again from offset \(start)",
                                          headers: headers(offset: start))
            }
            if start == 0 && position == upload.length { wholeBlock = chunkDigest }
        }
        do {
            if context.configuration.syncEveryPatch { try FileIO.fdatasync(fd) }
            guard try context.metadata.setReceived(id: upload.id, from: start, to: position) else {
                // Another server process on the same records moved this upload first.
                context.uploads.release(upload.id, hasher: nil)
                hasher?.cancel()
                let stored = (try? context.metadata.upload(id: upload.id))?.received
                return .error(409, "offset_conflict", "another request moved this upload's offset while this PATCH was sent; HEAD the upload and resume from its offset",
                              headers: responseHeaders + (stored.map { [(Tus.uploadOffset, String($0))] } ?? []))
            }
        } catch {
            context.uploads.release(upload.id, hasher: hasher)
            return ServerContext.failure(error).adding(headers(offset: start))
        }
        if position == upload.length {
            let known: SHA256Digest?
            if let wholeBlock {
                hasher?.cancel()
                known = wholeBlock
            } else {
                known = hasher?.finish(length: upload.length)
            }
            let result = context.commit(stagingPath: context.stagingPath(uploadID: upload.id), fd: fd, digest: digest,
                                        length: upload.length, computed: known, uploadID: upload.id)
            context.uploads.remove(upload.id)
            if let result { return result.adding(headers(offset: result.status == Tus.checksumMismatchStatus ? 0 : start)) }
            return .empty(204, headers: headers(offset: position))
        }
        hasher?.advance(to: position)
        context.uploads.release(upload.id, hasher: hasher)
        return .empty(204, headers: headers(offset: position))
    }

    func abort() {
        defer { FileIO.close(fd) }
        if failure == nil, expectedChecksum == nil, position > start, (try? context.metadata.setReceived(id: upload.id, from: start, to: position)) == true {
            hasher?.advance(to: position)
        }
        context.uploads.release(upload.id, hasher: hasher)
    }
}

extension ServerContext {
    /// The last byte landed: check the whole block's SHA-256, then hand the staging file
    /// to the block store, which makes it durable (the folder store: fdatasync, rename,
    /// sync the folder), and only then write the row. Returns nil on success,
    /// else the reply (460 when the bytes are not the block the upload was created for:
    /// the upload is reset to offset 0 and nothing enters the store).
    /// `computed` is the content's SHA-256 when the caller hashed it on the way in.
    func commit(stagingPath: String, fd: Int32, digest: SHA256Digest, length: Int64, computed: SHA256Digest?, uploadID: String?) -> HTTPResponse? {
        do {
            let actual = try computed ?? BlobStore.hash(fd: fd)
            guard actual == digest else {
                if let uploadID {
                    try FileIO.ftruncate(fd, 0)
                    try metadata.setReceived(id: uploadID, from: nil, to: 0)
                } else {
                    _ = unlink(stagingPath)
                }
                return .error(Tus.checksumMismatchStatus, "block_checksum_mismatch",
                              "the uploaded bytes hash to \(actual.hex), not \(digest.hex); nothing was stored and the upload starts again at offset 0")
            }
            // A block the workspace already has costs no quota; asked only when there is one.
            let adding = try configuration.quota == nil || metadata.blockSize(digest.hex) != nil ? 0 : length
            do {
                try recordingWithinQuota(adding) {
                    try blocks.adopt(stagingPath: stagingPath, fd: fd, as: digest)
                    try recordBlock(digest, size: length, uploadID: uploadID)
                }
            } catch let refusal as RequestFailure {
                // Over the quota: nothing entered the store; the upload starts again at 0
                // when the device tries later (the workspace may have room by then).
                if let uploadID {
                    try FileIO.ftruncate(fd, 0)
                    try metadata.setReceived(id: uploadID, from: nil, to: 0)
                } else {
                    _ = unlink(stagingPath)
                }
                return refusal.response
            }
            return nil
        } catch let error as BlockBeingRemoved {
            // The bytes went to the collection with the block it was removing: the upload starts over.
            if let uploadID {
                if let fd = try? FileIO.open(stagingPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600) { FileIO.close(fd) }
                _ = try? metadata.setReceived(id: uploadID, from: nil, to: 0)
            }
            return .error(503, "unavailable", "\(error); the upload starts again at offset 0 (HEAD gives it)", headers: [("Retry-After", "1")])
        } catch {
            return ServerContext.failure(error)
        }
    }
}
