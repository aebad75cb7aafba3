import Crypto
import Foundation
import TestSupport

/// The bulk row's files and its clock: a source folder of random files, and a transfer
/// timed from its start until every file reads back identical on the receiving side.
extension SyncBenchmark {
    /// The files of a source folder: relative path → size and SHA-256.
    struct ExpectedTree {
        var files: [String: (size: Int, hash: SHA256Digest)] = [:]
        var folders: [String] = []
        var bytes = 0
    }

    /// `files` files of 4-64 KiB of random bytes (sizes spread evenly), 100 to a folder.
    static func makeBulkSource(_ source: String, files: Int) throws -> ExpectedTree {
        _ = try? Bench.sh("rm -rf '\(source)'")
        var tree = ExpectedTree()
        var sizes = SeededGenerator(seed: 7)
        for i in 0..<files {
            let folder = String(format: "d%03d", i / 100)
            if i % 100 == 0 {
                try FileManager.default.createDirectory(atPath: source + "/" + folder, withIntermediateDirectories: true)
                tree.folders.append(folder)
            }
            let size = Int.random(in: 4096...65536, using: &sizes)
            let bytes = randomBytes(size, seed: UInt64(i) + 1_000)
            let relative = folder + String(format: "/f%05d.bin", i)
            try writeWhole(source + "/" + relative, bytes)
            tree.files[relative] = (size, SHA256Hasher.digest(bytes))
            tree.bytes += size
        }
        return tree
    }

    /// A transfer's figures: seconds until every file was identical on the receiver, the
    /// sender's own command's seconds, CPU seconds of the given processes and of the machine.
    struct Transfer {
        var seconds: Double
        var sendSeconds: Double
        var processCPU: Double
        var machineCPU: Double
        /// CPU seconds of each process of `pids`, in their order.
        var eachCPU: [Double] = []
    }

    /// Runs `send` on its own thread and, meanwhile, checks `receiver` (every 100 ms,
    /// folder by folder) until every expected file reads back with its bytes. The clock
    /// starts with `send`. `pids`: processes whose CPU is counted. `timeline`: told every
    /// half second how many files are identical so far, for a line of its own.
    static func timedTransfer(expected: ExpectedTree, receiver: String, pids: [pid_t], seconds limit: Double = 3600,
                              timeline: ((_ seconds: Double, _ identical: Int) -> Void)? = nil,
                              send: @escaping @Sendable () throws -> Void) throws -> Transfer {
        let cpu0 = pids.map(treeCPUSeconds), machine0 = Bench.machineBusySeconds()
        let start = Bench.now()
        let sender = SendResult()
        let thread = Thread {
            do { try send() } catch { sender.set(error: "\(error)") }
            sender.set(end: Bench.now())
        }
        thread.stackSize = 1 << 20
        thread.start()
        var pending: [String: Set<String>] = [:]
        for path in expected.files.keys {
            let slash = path.lastIndex(of: "/")!
            pending[String(path[..<slash]), default: []].insert(String(path[path.index(after: slash)...]))
        }
        var left = expected.files.count, lastReport = start, lastSample = start
        while left > 0 {
            if let error = sender.error { throw Bench.Failure(description: "the copy failed: \(error)") }
            guard Bench.now() - start < limit else { throw Bench.Failure(description: "\(left) files were not identical in \(receiver) after \(Int(limit)) s") }
            for (folder, names) in pending where !names.isEmpty {
                guard let listed = try? FileManager.default.contentsOfDirectory(atPath: receiver + "/" + folder) else { continue }
                for name in listed where names.contains(name) {
                    let relative = folder + "/" + name
                    guard let want = expected.files[relative], let bytes = readWhole(receiver + "/" + relative, limit: want.size),
                          bytes.count == want.size, SHA256Hasher.digest(bytes) == want.hash else { continue }
                    pending[folder]!.remove(name)
                    left -= 1
                }
            }
            if let timeline, Bench.now() - lastSample >= 0.5 {
                lastSample = Bench.now()
                timeline(lastSample - start, expected.files.count - left)
            }
            if Bench.now() - lastReport >= 10 {
                say("    \(expected.files.count - left) of \(expected.files.count) identical after \(Int(Bench.now() - start)) s")
                lastReport = Bench.now()
            }
            if left > 0 { usleep(100_000) }
        }
        let seconds = Bench.now() - start
        let sendEnd = sender.waitForEnd()
        if let error = sender.error { throw Bench.Failure(description: "the copy failed: \(error)") }
        let each = zip(pids, cpu0).map { treeCPUSeconds($0) - $1 }
        return Transfer(seconds: seconds, sendSeconds: sendEnd - start, processCPU: each.reduce(0, +),
                        machineCPU: Bench.machineBusySeconds() - machine0, eachCPU: each)
    }
}

/// CPU seconds of a process and of the processes below it (Syncthing runs its work in a
/// child of the process started).
func treeCPUSeconds(_ pid: pid_t) -> Double {
    ([pid] + TimedCommand.descendants(of: pid)).map { Bench.cpuSeconds(pid: $0) }.reduce(0, +)
}

/// The sending thread's outcome. `@unchecked Sendable`: guarded by `lock`; `done` is
/// signalled once, after `end` is set.
final class SendResult: @unchecked Sendable {
    private let lock = NSLock()
    private let done = DispatchSemaphore(value: 0)
    private var end = 0.0
    private var failure: String?

    func set(error: String) { lock.withLock { failure = error } }
    func set(end: Double) { lock.withLock { self.end = end }; done.signal() }
    var error: String? { lock.withLock { failure } }

    func waitForEnd() -> Double {
        done.wait()
        done.signal()
        return lock.withLock { end }
    }
}
