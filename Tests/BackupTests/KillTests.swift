import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// Crash test: a child process (this test binary, running `KillChild`) uploads a file
/// to a folder-backed server and is killed with SIGKILL mid-upload; a fresh worker on
/// the same database and server folder must finish it, re-sending at most the unfinished
/// rest of one block (in fact nothing: the server keeps the partial PATCH body).
@Suite struct KillTests {
    @Test func sigkillMidBlockResumesMidBlock() throws {
        let h = try Harness(label: "kill"); defer { h.remove() }
        let bytes = testBytes(10 * MiB, seed: 77)  // blocks of 4, 4 and 2 MiB
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

        // Kill it once the server holds block 0 and more than 1 MiB of block 1.
        try eventually("the child uploading into block 1", within: 120) {
            (try? FileIO.status(server.uploadPath(c.blocks[1]))).map { $0.st_size > MiB } ?? false
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal)
        let offsetAtKill = try #require(try? server.uploadOffset(url: "dir://" + c.blocks[1].hex))
        #expect(offsetAtKill < Int64(Blocks.size))
        #expect(FileIO.exists(server.blockPath(c.blocks[0])))
        #expect(try h.state(c) == .uploading)  // left as the killed process had it

        // The next run: a new worker (the lock died with the child).
        let next = plainWorker(db: h.db, transport: server, blobs: h.blobs, stateFolder: h.stateFolder)
        #expect(try next.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(try server.content(c.hash, size: c.size) == bytes)
        let resent = server.bytesReceived - Int64(bytes.count)
        #expect(resent >= 0)
        // The promise is at most the rest of one block; tus keeps what arrived, so what is
        // counted twice is at most the one 64 KiB piece logged but not stored at the kill.
        #expect(resent <= 64 * 1024, "re-sent \(resent) bytes after the kill")
    }
}

/// The child side of the crash test; runs only when the parent starts it.
@Suite(.enabled(if: ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"] != nil))
struct KillChild {
    @Test func uploadSlowlyUntilKilled() throws {
        let root = try #require(ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"])
        let db = try Database(path: root + "/catalog.db")
        let worker = plainWorker(db: db, transport: try DirectoryTransport(root: root + "/server", pieceDelayMicroseconds: 3_000),
                                 blobs: try BlobStore(root: root + "/blobs"), stateFolder: root + "/state")
        _ = try worker.drain()
        Issue.record("the child finished before it was killed")
    }
}
