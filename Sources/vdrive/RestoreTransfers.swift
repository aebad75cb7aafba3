import Foundation
import Protocol
import Storage

/// The restore's transfer threads: each takes the next piece of work, a block of a
/// file in flight first (so the files started are finished before others begin, and a
/// big file gets every thread), else the next listed file (`prepare`: already there?
/// open its temporary file, fetch its manifest). Each thread keeps its own kept-alive
/// connection (HTTPConnection hands an idle libcurl handle to each request), so
/// `count` threads are `count` transfers in flight on `count` connections. One more
/// thread, the completer, puts finished files on disk and under their names.
///
/// Memory stays bounded whatever the listing's length: `submit` blocks while
/// `2 × count` listed files wait, and a file in flight holds its manifest only.
/// `@unchecked Sendable`: the queues are guarded by `condition`.
final class RestoreTransfers: @unchecked Sendable {
    private let restorer: FileRestorer
    private let report: RestoreReport
    private let gate: RestoreGate
    private let condition = NSCondition()
    private var blocks: [(FileInFlight, Int)] = []
    private var blockHead = 0
    private var files: [FileRecord] = []
    private var fileHead = 0
    private let fileLimit: Int
    /// Files taken by a thread and not finished: their blocks may still come.
    private var filesOpen = 0
    private var closed = false
    /// Files whose blocks are all in, waiting for the completer.
    private var completions: [FileInFlight] = []
    private var completionHead = 0
    /// Threads not finished: the transfer threads and the completer.
    private var running: Int

    init(count: Int, restorer: FileRestorer, report: RestoreReport, gate: RestoreGate) {
        self.restorer = restorer; self.report = report; self.gate = gate
        fileLimit = 2 * count
        running = count + 1
        for i in 0..<count {
            Thread(named: "vd-restore-\(i)") { [self] in work() }.start()
        }
        Thread(named: "vd-restored") { [self] in complete() }.start()
    }

    /// Queues a listed file; waits while enough are queued.
    func submit(_ record: FileRecord) {
        condition.withLock {
            while files.count - fileHead >= fileLimit { condition.wait() }
            files.append(record)
            condition.broadcast()
        }
    }

    /// No more files: returns when every queued file is finished.
    func finish() {
        condition.withLock {
            closed = true
            condition.broadcast()
            while running > 0 { condition.wait() }
        }
    }

    private enum Work { case file(FileRecord), block(FileInFlight, Int) }

    private func next() -> Work? {
        condition.withLock {
            while true {
                if blockHead < blocks.count {
                    let b = blocks[blockHead]
                    blockHead += 1
                    if blockHead == blocks.count { blocks.removeAll(keepingCapacity: true); blockHead = 0 }
                    else if blockHead > 1024 { blocks.removeFirst(blockHead); blockHead = 0 }
                    return .block(b.0, b.1)
                }
                if fileHead < files.count {
                    let f = files[fileHead]
                    fileHead += 1
                    if fileHead > 256 { files.removeFirst(fileHead); fileHead = 0 }
                    filesOpen += 1
                    condition.broadcast()  // room for `submit`
                    return .file(f)
                }
                if closed && filesOpen == 0 {
                    running -= 1
                    condition.broadcast()
                    return nil
                }
                condition.wait()
            }
        }
    }

    /// A file taken by `next` is finished (restored, there, or failed).
    private func fileDone() {
        condition.withLock { filesOpen -= 1; condition.broadcast() }
    }

    private func work() {
        while let work = next() {
            gate.waitWhileHeld(report: report)
            switch work {
            case .file(let record):
                prepare(record)
            case .block(let file, let index):
                settle(index, of: file)
            }
        }
    }

    private func prepare(_ record: FileRecord) {
        if report.serverGone {
            report.failed(.serverGone("'\(record.path)': not tried, the server was unreachable"), unsettled: record.size)
            return fileDone()
        }
        do {
            switch try restorer.prepare(record) {
            case .alreadyThere:
                report.alreadyThere(size: record.size)
                fileDone()
            case .fetch(let file):
                if file.manifest.blocks.isEmpty { return finish(file) }
                condition.withLock {
                    for i in file.manifest.blocks.indices { blocks.append((file, i)) }
                    condition.broadcast()
                }
            }
        } catch {
            report.failed(error, unsettled: record.size)
            fileDone()
        }
    }

    private func settle(_ index: Int, of file: FileInFlight) {
        let length = Int64(file.manifest.length(ofBlock: index))
        var failure = file.state.withLock { $0.failure }
        if failure == nil && report.serverGone {
            failure = .serverGone("'\(file.record.path)': not finished, the server was unreachable")
        }
        if failure == nil {
            var seen: Int64 = 0
            do {
                let outcome = try restorer.block(index, of: file) { [report] bytes in
                    report.settled(bytes - seen, fetched: true)
                    file.state.withLock { $0.accounted += bytes - seen }
                    seen = bytes
                    return true
                }
                let fetched: Int64
                if case .fetched(let n) = outcome { fetched = n } else { fetched = 0 }
                // What the progress callback did not see (a kept block, a hole, the tail).
                report.settled(length - seen, fetched: fetched > seen)
                file.state.withLock { $0.accounted += length - seen; $0.downloaded += fetched }
            } catch {
                failure = error
            }
        }
        let last = file.state.withLock { state -> Bool in
            if let failure, state.failure == nil { state.failure = failure }
            state.remaining -= 1
            return state.remaining == 0
        }
        if last { finish(file) }
    }

    /// Every block of `file` is settled: to the completer, or reported if one failed.
    private func finish(_ file: FileInFlight) {
        let (failure, accounted) = file.state.withLock { ($0.failure, $0.accounted) }
        guard let failure else {
            return condition.withLock {
                while completions.count - completionHead >= fileLimit { condition.wait() }
                completions.append(file)
                condition.broadcast()
            }
        }
        restorer.abandon(file)
        report.failed(failure, unsettled: file.record.size - accounted)
        fileDone()
    }

    /// The completer: fdatasync, date and rename of each finished file, one after the
    /// other, so the transfer threads fetch while the disk catches up (a photo's
    /// fdatasync waits for the disk; on the transfer thread it left the link idle).
    private func complete() {
        while let file = nextCompletion() {
            do {
                try restorer.complete(file)
                report.restored(downloaded: file.state.withLock { $0.downloaded }, folder: FileRestorer.folder(of: file.final))
            } catch {
                report.failed(error, unsettled: 0)
            }
            fileDone()
        }
    }

    private func nextCompletion() -> FileInFlight? {
        condition.withLock {
            while completionHead == completions.count {
                // Every listed file taken and done (a file still queued would come here later).
                if closed && filesOpen == 0 && fileHead == files.count {
                    running -= 1
                    condition.broadcast()
                    return nil
                }
                condition.wait()
            }
            let file = completions[completionHead]
            completionHead += 1
            if completionHead == completions.count { completions.removeAll(keepingCapacity: true); completionHead = 0 }
            condition.broadcast()  // room for `finish`
            return file
        }
    }
}
