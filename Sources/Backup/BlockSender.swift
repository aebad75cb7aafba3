import Crypto
import Storage

/// Sends one block of a file: reads the bytes the server lacks from the local block
/// store into its own buffer, once, and PATCHes them.
///
/// No hashing of bytes the drive already hashed (it cost the backup a second pass over
/// every byte in the mount's profile): a whole block sent from
/// offset 0 carries the block's own digest as its `Upload-Checksum`: it IS the SHA-256 of
/// exactly these bytes when the local block is intact, and the server checks it. Only a
/// block resumed at offset k > 0 is hashed here, over the chunk [k, length) sent, since
/// no digest of that range exists. Either way the server checks the whole block against
/// its name at its last byte, so a damaged local block is refused, never stored; the
/// sender then re-reads the block (on that error path only) to tell a damaged local copy
/// (the item fails) from bytes damaged on the way (an integrity failure, retried).
///
/// One sender per thread: it owns a `Blocks.size` buffer and is not thread-safe.
final class BlockSender {
    let transport: BackupTransport
    let blobs: BackupBlobSource
    private let buffer: UnsafeMutableRawBufferPointer

    init(transport: BackupTransport, blobs: BackupBlobSource) {
        self.transport = transport
        self.blobs = blobs
        buffer = .allocate(byteCount: Blocks.size, alignment: 64)
    }

    deinit { buffer.deallocate() }

    /// What one `send` did.
    struct Sent {
        /// Bytes put on the wire (including any the server then refused).
        var bytesSent: Int64
        /// The capture date, when this was block 0 read from offset 0 (no extra read).
        var captureDate: CaptureDate?
    }

    /// Sends `[block.offset, block.length)` of `block`. `wantCaptureDate`: block 0 of an
    /// item without a capture date yet. `progress(sent)` reports this PATCH's bytes so far
    /// and returns false to cancel it (stop, pause).
    func send(_ block: BlockUpload, mtime: Int64, wantCaptureDate: Bool,
              progress: (Int64) -> Bool) throws -> Sent {
        let fd = try open(block)
        defer { FileIO.close(fd) }
        let start = block.offset
        let count = Int(block.length - start)
        let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
        let n: Int
        do {
            n = try FileIO.pread(fd, into: chunk, at: start)
        } catch {
            throw LocalBlobProblem(reason: "the local copy cannot be read (block \(block.index)): \(error)")
        }
        guard n == count else {
            throw LocalBlobProblem(reason: "the local copy of block \(block.index) ends at \(start + Int64(n)) bytes, expected \(block.length)")
        }
        let bytes = UnsafeRawBufferPointer(chunk)
        var date: CaptureDate?
        if wantCaptureDate && block.index == 0 && start == 0 {
            date = CaptureDate.from(prefix: UnsafeRawBufferPointer(rebasing: bytes[0..<min(count, CaptureDate.prefixLength)]),
                                    mtime: mtime)
        }
        let checksum: SHA256Digest
        if start == 0 {
            checksum = block.hash
        } else {
            let hasher = SHA256Hasher()
            hasher.update(bytes)
            checksum = hasher.finish()
        }
        var sent: Int64 = 0
        do {
            if case .s3 = block.kind {
                // A whole block to the object store (the plan of a scaled server always starts at 0).
                try transport.put(block, chunk: bytes) { now in
                    sent = max(sent, now)
                    return progress(now)
                }
                return Sent(bytesSent: sent, captureDate: date)
            }
            let newOffset = try transport.patch(url: block.url, offset: start, chunk: bytes, chunkSHA256: checksum) { now in
                sent = max(sent, now)
                return progress(now)
            }
            guard newOffset == block.length else {
                throw BackupTransportError(.offsetConflict(serverOffset: newOffset),
                                           "the server holds \(newOffset) of \(block.length) bytes of block \(block.index) after a whole PATCH")
            }
        } catch let error as BackupTransportError where error.kind == .checksumMismatch {
            if let actual = try? Self.digest(fd: fd, length: block.length), actual != block.hash {
                throw LocalBlobProblem(reason: "the local copy is corrupt: block \(block.index) hashes to \(actual.hex), not \(block.hash.hex)")
            }
            throw error
        }
        return Sent(bytesSent: sent, captureDate: date)
    }

    private func open(_ block: BlockUpload) throws -> Int32 {
        let fd: Int32
        do {
            fd = try blobs.openBlock(block.hash)
        } catch let error as Errno where error == .noSuchFileOrDirectory {
            throw LocalBlobProblem(reason: "the local copy is missing (block \(block.index), \(block.hash.hex))")
        } catch {
            throw LocalBlobProblem(reason: "the local copy cannot be opened (block \(block.index)): \(error)")
        }
        let size = (try? FileIO.status(fd)).map { Int64($0.st_size) }
        guard size == block.length else {
            FileIO.close(fd)
            throw LocalBlobProblem(reason: "the local copy of block \(block.index) has \(size.map(String.init) ?? "unknown") bytes, expected \(block.length)")
        }
        return fd
    }

    /// The SHA-256 of the block's bytes, read again: only after the server refused it.
    private static func digest(fd: Int32, length: Int64) throws -> SHA256Digest {
        try BlobStore.hash(fd: fd, upTo: length)
    }
}

/// The local copy cannot be sent as it is: the item fails with this reason.
struct LocalBlobProblem: Error { let reason: String }
