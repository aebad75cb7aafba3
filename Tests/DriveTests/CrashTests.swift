import Testing
import Foundation
import Crypto
import Storage
import Synchronization

/// Kill points: SIGKILL the mount process while a writer is busy, remount, and check
/// every file in the writer's manifest (JuiceFS crash_consistency style).
@Suite(.tags(.mount), .needsMount, .serialized) struct CrashTests {
    final class Manifest: Sendable {
        /// name → every version whose close returned (digest, when), and the one being
        /// written when the kill came.
        let entries = Mutex<[String: (closed: [(digest: String, at: Date)], inFlight: String?)]>([:])
        let writes = Atomic<Int>(0)
    }

    /// Outside the Camera Roll a close reaches the catalog with its group commit, at most
    /// the commit window (10 ms) later: a version closed this long before the kill must
    /// have survived it (the margin is for a busy machine, not for the drive).
    static let surelyCommitted: TimeInterval = 1.0

    static func writerLoop(root: String, manifest: Manifest, seed: UInt64) {
        var i = 0
        while true {
            i += 1
            let name = i % 3 == 0 ? "rolling.bin" : "file\(i).bin"
            let size = 20_000 + Int((seed &* UInt64(i) &* 2654435761) % 1_500_000)
            let bytes = pseudoRandomBytes(size, seed: seed &+ UInt64(i))
            let digest = SHA256Hasher.digest(bytes).hex
            manifest.entries.withLock { $0[name] = ($0[name]?.closed ?? [], digest) }
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
            let closedAt = Date()
            manifest.entries.withLock { $0[name] = (($0[name]?.closed ?? []) + [(digest, closedAt)], nil) }
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
            let killedAt = Date()
            drive.kill9()
            try eventually("the writer stops after the kill") { writer.isFinished }
            let cutoff = killedAt.addingTimeInterval(-Self.surelyCommitted)

            try drive.start()
            let entries = manifest.entries.withLock { $0 }
            var checked = 0
            for (name, state) in entries where name.hasPrefix("") {
                let full = drive.mountPoint + "/round\(round)/" + name
                // The last version closed surely before the kill, and every version after it.
                let settled = state.closed.last { $0.at < cutoff }?.digest
                let recent = state.closed.filter { $0.at >= cutoff }.map(\.digest)
                guard FileManager.default.fileExists(atPath: full) else {
                    // Absent is allowed only for a file with no version closed surely before.
                    #expect(settled == nil, "\(name) disappeared after the kill")
                    continue
                }
                let got = try sha256(ofFile: full)
                let allowed = ([settled, state.inFlight].compactMap { $0 }) + recent
                if settled == nil && got == SHA256Hasher.digest([UInt8]()).hex { continue }   // created, never closed
                #expect(allowed.contains(got), "\(name): content is not a version that was closed or being written")
                checked += 1
            }
            #expect(checked >= 10)
            manifest.entries.withLock { $0.removeAll() }
            try drive.unmount()
        }
    }

    /// What must survive a kill at once, whatever the commit window (here a whole second,
    /// so that a file waiting for its group would be lost): a photo whose close returned,
    /// and a file whose fsync returned (not even closed). A file closed outside the Camera
    /// Roll just before the kill may be lost; the catalog is then as it was before its create.
    @Test func aClosedPhotoAndAnFsyncedFileSurviveAKillRightAfter() throws {
        let drive = try MountedDrive(label: "vdrive-crash-window", environment: ["VDRIVE_COMMIT_WINDOW_MS": "1000"], start: false)
        defer { drive.stop() }
        func writeAll(_ path: String, _ bytes: [UInt8], fsyncFirst: Bool) throws -> Int32 {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
            guard fd >= 0 else { throw TestFailure("open \(path): errno \(errno)") }
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
            guard n == bytes.count else { throw TestFailure("write \(path): errno \(errno)") }
            if fsyncFirst && fsync(fd) != 0 { throw TestFailure("fsync \(path): errno \(errno)") }
            return fd
        }
        let photo = pseudoRandomBytes(300_000, seed: 41)
        let note = Array("written, fsynced, never closed".utf8)

        try drive.startForeground()
        close(try writeAll(drive.path("Camera Roll/IMG_0001.jpg"), photo, fsyncFirst: false))
        drive.kill9()
        try drive.startForeground()
        #expect(FileManager.default.contents(atPath: drive.path("Camera Roll/IMG_0001.jpg")).map { [UInt8]($0) } == photo,
                "a photo whose close returned is kept")

        let fd = try writeAll(drive.path("notes.txt"), note, fsyncFirst: true)
        drive.kill9()
        close(fd)
        try drive.startForeground()
        #expect(FileManager.default.contents(atPath: drive.path("notes.txt")).map { [UInt8]($0) } == note,
                "a file whose fsync returned is kept")
        try drive.unmount()
    }
}
