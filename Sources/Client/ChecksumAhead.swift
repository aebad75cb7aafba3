import Crypto
import Foundation

/// Hashes the next chunk of an upload on a helper thread while the current chunk is
/// sent, so the `Upload-Checksum` of chunk N+1 costs no wall time during PATCH N.
/// At most one computation is in flight; `finish()` waits for it, so the descriptor
/// is never read after the upload returns.
/// `@unchecked Sendable`: every field is read and written under `condition`.
final class ChecksumAhead: @unchecked Sendable {
    private let condition = NSCondition()
    private var key: (offset: Int64, length: Int64)?
    private var result: Result<SHA256Digest, ClientError>?
    private var running = false

    /// Starts hashing `length` bytes of `fd` from `offset` (after the previous one ended).
    func start(fd: Int32, offset: Int64, length: Int64) {
        finish()
        condition.lock()
        key = (offset, length)
        result = nil
        running = true
        condition.unlock()
        Thread {
            let r = Result { () throws(ClientError) -> SHA256Digest in try WorkspaceClient.hash(fd: fd, offset: offset, length: length) }
            self.condition.lock()
            self.result = r
            self.running = false
            self.condition.broadcast()
            self.condition.unlock()
        }.start()
    }

    /// The digest of exactly (`offset`, `length`) if that is what was started; nil otherwise.
    func take(offset: Int64, length: Int64) throws(ClientError) -> SHA256Digest? {
        finish()
        condition.lock()
        defer { condition.unlock() }
        guard let key, key.offset == offset, key.length == length, let result else { return nil }
        self.key = nil
        return try result.get()
    }

    /// Waits for the computation in flight, if any.
    func finish() {
        condition.lock()
        while running { condition.wait() }
        condition.unlock()
    }
}
