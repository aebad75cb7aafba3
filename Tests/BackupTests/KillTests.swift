import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// Crash test: a child process (this test binary, running `KillChild`) uploads a file
/// to a folder-backed server and is killed with SIGKILL mid-upload; a fresh worker on
/// the same database and server folder must finish it, re-sending at most one chunk.
@Suite struct KillTests {
    static let chunk = 256 * 1024

    @Test func sigkillMidUploadResumesMidFileResendingAtMostOneChunk() throws {
        let h = try Harness(chunkSize: Self.chunk, label: "kill"); defer { h.remove() }
        let bytes = testBytes(40 * Self.chunk, seed: 77)  // 10 MiB
        let c = try h.commit(bytes, path: "Camera Roll/long.mov")
        let serverRoot = h.root + "/server"
        let server = try DirectoryTransport(root: serverRoot)

        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()  // this test binary
        child.arguments = ["--testing-library", "swift-testing", "--filter", "KillChild"]
        var environment = ProcessInfo.processInfo.environment
        environment["VDRIVE_KILL_CHILD_ROOT"] = h.root
        child.environment = environment
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()

        // Kill it once the server holds more than 10 chunks but not all of them.
        try eventually("the child uploading past chunk 10", within: 120) {
            (try? FileIO.status(server.uploadPath(c.hash))).map { Int64($0.st_size) > Int64(10 * Self.chunk) } ?? false
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal)
        let offsetAtKill = try #require(try? server.uploadOffset(url: "dir://" + c.hash.hex))
        #expect(offsetAtKill < Int64(bytes.count))
        #expect(try h.state(c) == .uploading)  // left as the killed process had it

        // The next run: a new worker (the lock died with the child).
        let next = plainWorker(db: h.db, transport: server, blobs: h.blobs, stateFolder: h.stateFolder, chunkSize: Self.chunk)
        #expect(try next.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        let stored = try #require(FileManager.default.contents(atPath: server.blobPath(c.hash)))
        #expect(stored == Data(bytes))
        let resent = server.bytesReceived - Int64(bytes.count)
        #expect(resent >= 0)
        #expect(resent <= Int64(Self.chunk), "re-sent \(resent) bytes after the kill")
    }
}

/// The child side of the crash test; runs only when the parent starts it.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"] != nil))
struct KillChild {
    @Test func uploadSlowlyUntilKilled() throws {
        let root = try #require(ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"])
        let db = try Database(path: root + "/catalog.db")
        let worker = plainWorker(db: db, transport: try DirectoryTransport(root: root + "/server", pieceDelayMicroseconds: 3_000),
                                 blobs: try BlobStore(root: root + "/blobs"), stateFolder: root + "/state",
                                 chunkSize: KillTests.chunk)
        _ = try worker.drain()
        Issue.record("the child finished before it was killed")
    }
}
