import Foundation
import Testing
import Crypto
import Storage
@testable import Backup

/// Crash test: a child process (this test binary, running `KillChild`) uploads a file
/// to a folder-backed server and is killed with SIGKILL mid-upload; a fresh worker on
/// the same database and server folder must finish it, re-sending at most the unfinished
/// rest of one block (in fact nothing: the server keeps the partial PATCH body).
@Suite(.tags(.logic)) struct KillTests {
    /// With one block in flight, and with several (each PATCH in flight keeps its own
    /// offset on the server; the next run's plan carries them all).
    @Test(arguments: [1, 4])
    func sigkillMidBlockResumesMidBlock(_ blocksInFlight: Int) throws {
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
        environment["VDRIVE_KILL_CHILD_BLOCKS_IN_FLIGHT"] = String(blocksInFlight)
        child.environment = environment
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()

        // Kill it once the server holds more than 1 MiB of block 1.
        try eventually("the child uploading into block 1", within: 120) {
            (try? FileIO.status(server.uploadPath(c.blocks[1]))).map { $0.st_size > MiB } ?? false
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal)
        let offsetAtKill = try #require(try? server.uploadOffset(url: "dir://" + c.blocks[1].hex))
        #expect(offsetAtKill < Int64(Blocks.size))
        if blocksInFlight == 1 {
            #expect(FileIO.exists(server.blockPath(c.blocks[0])))  // block by block
        } else {
            let partial = c.blocks.filter { FileIO.exists(server.uploadPath($0)) }
            #expect(partial.count > 1, "several blocks were in flight at the kill")
        }
        #expect(try h.state(c) == .uploading)  // left as the killed process had it

        // The next run: a new worker (the lock died with the child).
        let next = plainWorker(db: h.db, transport: server, blobs: h.blobs, stateFolder: h.stateFolder,
                               blocksInFlight: blocksInFlight)
        #expect(try next.drain() == .empty(nextDue: nil))
        #expect(try h.state(c) == .done)
        #expect(try server.content(c.hash, size: c.size) == bytes)
        let resent = server.bytesReceived - Int64(bytes.count)
        #expect(resent >= 0)
        // The promise is at most the rest of each block in flight; tus keeps what arrived, so
        // what is counted twice is at most the 64 KiB piece of each PATCH in flight that was
        // logged but not stored at the kill.
        #expect(resent <= Int64(blocksInFlight * 64 * 1024), "re-sent \(resent) bytes after the kill")
    }
}

/// The child side of the crash test; runs only when the parent starts it.
@Suite(.tags(.logic), .enabled(if: ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"] != nil))
struct KillChild {
    @Test func uploadSlowlyUntilKilled() throws {
        let root = try #require(ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_ROOT"])
        let width = Int(ProcessInfo.processInfo.environment["VDRIVE_KILL_CHILD_BLOCKS_IN_FLIGHT"] ?? "") ?? 1
        let db = try Database(path: root + "/catalog.db")
        let worker = plainWorker(db: db, transport: try DirectoryTransport(root: root + "/server", pieceDelayMicroseconds: 3_000),
                                 blobs: try BlobStore(root: root + "/blobs"), stateFolder: root + "/state",
                                 blocksInFlight: width)
        _ = try worker.drain()
        Issue.record("the child finished before it was killed")
    }
}
