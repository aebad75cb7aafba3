import Client
import Crypto
import Foundation
import Protocol
import Storage
import Testing

/// Upload of a block with an off-the-shelf tus client (tuspy, from PyPI) through the tus creation endpoint.
@Suite(.tags(.endToEnd)) struct TuspyTests {
    static func tuspyAvailable() -> Bool {
        if (try? run("/usr/bin/env", ["python3", "-c", "import tusclient"]))?.0 == 0 { return true }
        let install = try? run("/usr/bin/env", ["python3", "-m", "pip", "install", "--quiet", "tuspy"])
        if (try? run("/usr/bin/env", ["python3", "-c", "import tusclient"]))?.0 == 0 { return true }
        print("TuspyTests skipped: python3 cannot import tusclient and 'pip install tuspy' failed: \(install?.2 ?? "python3 not found")")
        return false
    }

    @Test(.enabled(if: tuspyAvailable())) func tuspyUploadsThroughTusCreation() throws {
        let s = try TestServer()
        defer { s.stop() }
        let f = TestFile(in: s.dir.path, size: Blocks.size, seed: 11)
        let script = """
        import sys
        from tusclient import client
        c = client.TusClient(sys.argv[1] + '/v1/tus', headers={'Authorization': 'Bearer ' + sys.argv[2]})
        u = c.uploader(sys.argv[3], chunk_size=1024 * 1024, metadata={'sha256': sys.argv[4], 'filename': 'photo.jpg'})
        u.upload()
        print('offset', u.offset)
        """
        let r = try run("/usr/bin/env", ["python3", "-c", script, s.base, s.token, f.path, f.digest.hex])
        #expect(r.0 == 0, "tuspy failed: \(r.2)")
        #expect(r.1.contains("offset \(f.size)"))
        #expect(try s.hasBlock(f.digest))
        // More than a block: refused at creation (413, Tus-Max-Size).
        let big = TestFile(in: s.dir.path, size: Blocks.size + 1, seed: 12)
        let tooBig = try run("/usr/bin/env", ["python3", "-c", script, s.base, s.token, big.path, big.digest.hex])
        #expect(tooBig.0 != 0)
        #expect(tooBig.2.contains("413"), "\(tooBig.2)")
        // Without the token, creation is refused.
        let refused = try run("/usr/bin/env", ["python3", "-c", script, s.base, "wrong", f.path, f.digest.hex])
        #expect(refused.0 != 0)
    }
}

/// 507 on a full disk, then the upload resumes once space is freed. Needs root to mount a small tmpfs.
@Suite(.tags(.endToEnd)) struct DiskFullTests {
    static func canMount() -> Bool {
        guard getuid() == 0 else { print("DiskFullTests skipped: mounting a small tmpfs needs root"); return false }
        return true
    }

    @Test(.enabled(if: canMount())) func diskFullIs507ThenResumes() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let mnt = dir.path + "/small"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        let m = try run("/bin/mount", ["-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt])
        guard m.0 == 0 else { print("DiskFullTests skipped: mount failed: \(m.2)"); return }
        defer { _ = try? run("/bin/umount", [mnt]) }
        let s = try TestServer(dataDirectory: mnt + "/data")
        defer { s.stop() }
        let f = TestFile(in: dir.path, size: 8 << 20, seed: 13)
        let fd = f.open()
        defer { close(fd) }
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks), tickets.count == 2 else {
            throw TestFailure("expected two blocks to upload")
        }
        // The first block fits; the second finds the disk full.
        try s.client.uploadBlock(tickets[0], fd: fd)
        let url = tickets[1].url
        var failure: ClientError?
        do { _ = try s.client.patch(url: url, offset: 0, fd: fd, fileOffset: tickets[1].fileOffset, length: tickets[1].length) } catch { failure = error }
        #expect(failure?.description.contains("507") == true, "\(String(describing: failure))")
        #expect(failure?.description.contains("disk is full") == true)
        let offset = try s.client.uploadOffset(url: url)
        #expect(offset == 0)
        let remount = try run("/bin/mount", ["-o", "remount,size=40m", mnt])
        #expect(remount.0 == 0)
        try s.client.uploadFile(fd: fd, size: f.size)
        try s.record(f, at: "f")
        #expect(try s.client.presentContents([f.content]) == [f.content])
    }
}
