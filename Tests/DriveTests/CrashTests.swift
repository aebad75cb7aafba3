import Testing
import Foundation
import Crypto
import Storage
import Synchronization

/// Kill points: SIGKILL the mount process while a writer is busy, remount, and check
/// every file in the writer's manifest (JuiceFS crash_consistency style).
@Suite(.serialized) struct CrashTests {
    final class Manifest: Sendable {
        /// name → digests that may legally be there: the last committed one, and the one
        /// being written when the kill came (its close may have returned just before).
        let entries = Mutex<[String: (committed: String?, inFlight: String?)]>([:])
        let writes = Atomic<Int>(0)
    }

    static func writerLoop(root: String, manifest: Manifest, seed: UInt64) {
        var i = 0
        while true {
            i += 1
            let name = i % 3 == 0 ? "rolling.bin" : "file\(i).bin"
            let size = 20_000 + Int((seed &* UInt64(i) &* 2654435761) % 1_500_000)
            let bytes = pseudoRandomBytes(size, seed: seed &+ UInt64(i))
            let digest = SHA256Hasher.digest(bytes).hex
            manifest.entries.withLock { $0[name] = ($0[name]?.committed, digest) }
            let fd = open(root + "/" + name, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            if fd < 0 { return }
            var ok = true
            bytes.withUnsafeBytes { b in
                var off = 0
                while off < b.count {
                    let n = write(fd, b.baseAddress! + off, min(131_072, b.count - off))
                    if n <= 0 { ok = false; break }
                    off += n
                }
            }
            if close(fd) != 0 || !ok { return }
            manifest.entries.withLock { $0[name] = (digest, nil) }
            manifest.writes.add(1, ordering: .relaxed)
        }
    }

    @Test func killDuringWritesLosesNothingThatWasClosed() throws {
        let drive = try MountedDrive(label: "vdrive-crash")
        defer { drive.stop() }
        try drive.unmount()
        let manifest = Manifest()
        for round in 0..<3 {
            try drive.startForeground()
            let root = drive.mountPoint + "/round\(round)"
            mkdir(root, 0o755)
            let before = manifest.writes.load(ordering: .relaxed)
            let writer = Thread { CrashTests.writerLoop(root: root, manifest: manifest, seed: UInt64(round + 1) * 7919) }
            writer.start()
            // Let it write a while, then kill the mount mid-stream.
            var waited = 0
            while manifest.writes.load(ordering: .relaxed) < before + 20 && waited < 400 { usleep(25_000); waited += 1 }
            usleep(UInt32(100_000 + round * 70_000))
            drive.kill9()
            while !writer.isFinished { usleep(10_000) }

            try drive.start()
            let entries = manifest.entries.withLock { $0 }
            var checked = 0
            for (name, state) in entries where name.hasPrefix("") {
                let full = drive.mountPoint + "/round\(round)/" + name
                guard FileManager.default.fileExists(atPath: full) else {
                    // Absent is allowed only for a file whose first version never closed.
                    #expect(state.committed == nil, "\(name) disappeared after the kill")
                    continue
                }
                let got = try sha256(ofFile: full)
                let allowed = [state.committed, state.inFlight].compactMap { $0 }
                if state.committed == nil && got == SHA256Hasher.digest([UInt8]()).hex { continue }   // created, never closed
                #expect(allowed.contains(got), "\(name): content is neither the committed nor the in-flight version")
                checked += 1
            }
            #expect(checked >= 10)
            manifest.entries.withLock { $0.removeAll() }
            try drive.unmount()
        }
    }
}
