import Foundation
import Storage
import Synchronization

/// Keeps several block PATCHes in flight (on a link with a round trip of
/// 50 ms, one request at a time leaves the pipe idle between requests). A fixed set of
/// threads, each with its own `BlockSender` (its own 4 MiB buffer) and its own blocking
/// transport call; the engine thread submits jobs and collects results.
///
/// Only the engine thread touches the database: senders read block files, call the
/// transport, and hand back a result. So the queue's state machine, and every kill
/// point, stay those of one thread; what runs in parallel is bytes on the wire.
///
/// With one sender there is no thread at all: `submit` sends on the calling thread,
/// exactly as a sequential uploader would (tests measure this thread's reads).
final class SenderPool {
    /// One block to send, and what the engine thread reads back while it is in flight.
    final class Job: Sendable {
        let transfer: Int64
        let block: BlockUpload
        let mtime: Int64
        let wantCaptureDate: Bool
        /// Bytes of this PATCH sent so far (the engine reports the deltas for the rate).
        let progress = Atomic<Int64>(0)
        /// Set by the engine thread to cancel this PATCH at its next progress tick.
        let cancelled = Atomic<Bool>(false)
        /// Of `progress`, what the engine thread has already counted (its own field).
        let counted = Atomic<Int64>(0)

        init(transfer: Int64, block: BlockUpload, mtime: Int64, wantCaptureDate: Bool) {
            self.transfer = transfer; self.block = block; self.mtime = mtime; self.wantCaptureDate = wantCaptureDate
        }
    }

    struct Finished: Sendable {
        let job: Job
        let result: Result<BlockSender.Sent, any Error>
    }

    /// The job list and the results, guarded by `condition`.
    /// `@unchecked Sendable`: every field is read and written with `condition` locked.
    private final class Shared: @unchecked Sendable {
        let condition = NSCondition()
        var jobs: [Job] = []
        var finished: [Finished] = []
        var shutdown = false
    }

    let width: Int
    private let shared = Shared()
    private let inline: BlockSender?
    private let shouldContinue: @Sendable () -> Bool
    /// Jobs submitted and not yet collected.
    private(set) var outstanding = 0

    init(width: Int, transport: BackupTransport, blobs: BackupBlobSource, shouldContinue: @escaping @Sendable () -> Bool) {
        self.width = max(1, width)
        self.shouldContinue = shouldContinue
        if self.width == 1 {
            inline = BlockSender(transport: transport, blobs: blobs)
            return
        }
        inline = nil
        for n in 0..<self.width {
            let thread = Thread(named: "vd-send-\(n)") { [shared] in
                let sender = BlockSender(transport: transport, blobs: blobs)
                while let job = Self.take(shared) {
                    let result = Result { try Self.run(job, with: sender, shouldContinue: shouldContinue, progress: { _ in }) }
                    shared.condition.lock()
                    shared.finished.append(Finished(job: job, result: result))
                    shared.condition.broadcast()
                    shared.condition.unlock()
                }
            }
            thread.start()
        }
    }

    deinit {
        shared.condition.lock()
        shared.shutdown = true
        shared.condition.broadcast()
        shared.condition.unlock()
    }

    var hasRoom: Bool { outstanding < width }

    /// Hands `job` to a sender. Inline (one sender), it runs now, and `inlineProgress` is
    /// called on this thread as bytes go; pooled, the engine reads `job.progress` instead.
    func submit(_ job: Job, inlineProgress: (Int64) -> Void) {
        outstanding += 1
        if let inline {
            let result = Result {
                try Self.run(job, with: inline, shouldContinue: shouldContinue, progress: inlineProgress)
            }
            shared.finished.append(Finished(job: job, result: result))
            return
        }
        shared.condition.lock()
        shared.jobs.append(job)
        shared.condition.broadcast()
        shared.condition.unlock()
    }

    /// The jobs finished since the last call; waits up to `timeout` for at least one.
    func collect(timeout: Double) -> [Finished] {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while shared.finished.isEmpty && outstanding > 0 {
            if !shared.condition.wait(until: deadline) { break }
        }
        let out = shared.finished
        shared.finished = []
        outstanding -= out.count
        return out
    }

    private static func take(_ shared: Shared) -> Job? {
        shared.condition.lock()
        defer { shared.condition.unlock() }
        while shared.jobs.isEmpty && !shared.shutdown { shared.condition.wait() }
        if shared.shutdown { return nil }
        return shared.jobs.removeFirst()
    }

    private static func run(_ job: Job, with sender: BlockSender, shouldContinue: @Sendable () -> Bool,
                            progress: (Int64) -> Void) throws -> BlockSender.Sent {
        // Cancelled while it waited for a sender: not one byte goes out.
        guard !job.cancelled.load(ordering: .relaxed), shouldContinue() else {
            throw BackupTransportError(.cancelled, "stopped")
        }
        return try sender.send(job.block, mtime: job.mtime, wantCaptureDate: job.wantCaptureDate) { sent in
            job.progress.store(sent, ordering: .relaxed)
            progress(sent)
            return !job.cancelled.load(ordering: .relaxed) && shouldContinue()
        }
    }
}
