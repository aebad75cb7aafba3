import Client
import Crypto
import Foundation
import Protocol
import Server
import Testing

/// What the server repairs when it starts on a data folder left by an unclean stop.
@Suite struct RecoveryTests {
    func start(_ data: String, expiry: Int64 = 7 * 86400) throws -> WorkspaceServer {
        try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0, uploadExpiry: expiry))
    }

    @Test func offsetIsClampedToTheStagingFile() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("d")
        let f = TestFile(in: dir.path, size: 3000)
        let fd = f.open()
        defer { close(fd) }
        var id = ""
        do {
            let server = try start(data)
            defer { server.stop() }
            let client = WorkspaceClient(baseURL: server.baseURL, token: token)
            guard case .upload(let url, _, _) = try client.createUpload(hash: f.digest, size: f.size) else { throw TestFailure("expected upload") }
            #expect(try client.patch(url: url, offset: 0, fd: fd, fileOffset: 0, length: 1000) == 1000)
            id = String(url.split(separator: "/").last!.prefix { $0 != "?" })
        }
        // As after a power loss that kept the row but lost the file's tail.
        #expect(truncate(data + "/blobs/staging/tus-" + id, 400) == 0)
        let server = try start(data)
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        guard case .upload(let url, let offset, _) = try client.createUpload(hash: f.digest, size: f.size) else { throw TestFailure("expected upload") }
        #expect(offset == 400)
        #expect(try client.uploadOffset(url: url) == 400)
        try client.uploadBlob(hash: f.digest, size: f.size, fd: fd)
        #expect(try client.presentHashes([f.digest]) == [f.digest])
    }

    @Test func expiredUploadsAreSweptAndStrayStagingFilesRemoved() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("d")
        let f = TestFile(in: dir.path, size: 100)
        var oldURL = ""
        do {
            let server = try start(data, expiry: -10)
            defer { server.stop() }
            guard case .upload(let url, _, _) = try WorkspaceClient(baseURL: server.baseURL, token: token).createUpload(hash: f.digest, size: f.size) else {
                throw TestFailure("expected upload")
            }
            oldURL = url
        }
        writeFile(data + "/blobs/staging/leftover", [1, 2, 3])
        let server = try start(data)
        defer { server.stop() }
        let staging = try FileManager.default.contentsOfDirectory(atPath: data + "/blobs/staging")
        #expect(staging.isEmpty)
        guard case .upload(let url, let offset, _) = try WorkspaceClient(baseURL: server.baseURL, token: token).createUpload(hash: f.digest, size: f.size) else {
            throw TestFailure("expected upload")
        }
        #expect(offset == 0)
        #expect(url.split(separator: "?")[0].split(separator: "/").last != oldURL.split(separator: "?")[0].split(separator: "/").last)
    }

    @Test func blobRenamedButNotRecordedIsRecordedAfterCheck() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("d")
        let f = TestFile(in: dir.path, size: 5000)
        let bad = TestFile(in: dir.path, size: 5000, seed: 2)
        // As if killed between the rename into the store and the row: one right, one damaged.
        for (name, source) in [(f.digest, f), (bad.digest, f)] {
            let folder = data + "/blobs/" + name.hex.prefix(2)
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: source.path, toPath: folder + "/" + name.hex)
        }
        let server = try start(data)
        defer { server.stop() }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        #expect(try client.createUpload(hash: f.digest, size: f.size) == .present)
        guard case .upload = try client.createUpload(hash: bad.digest, size: bad.size) else {
            Issue.record("a blob file with the wrong content must not count as present")
            return
        }
        #expect(!FileManager.default.fileExists(atPath: data + "/blobs/" + bad.digest.hex.prefix(2) + "/" + bad.digest.hex))
    }
}

/// Stopping the server (SIGTERM path) while a PATCH is in flight.
@Suite struct StopTests {
    @Test func stopDuringAPatchKeepsTheBytesReceived() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("d")
        let f = TestFile(in: dir.path, size: 64 << 20, seed: 21)
        let fd = f.open()
        defer { close(fd) }
        let server = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
        var stopped = false
        defer { if !stopped { server.stop() } }
        let client = WorkspaceClient(baseURL: server.baseURL, token: token)
        guard case .upload(let url, _, _) = try client.createUpload(hash: f.digest, size: f.size) else { throw TestFailure("expected upload") }
        let sent = Mutex<Int64>(0)
        let started = Mutex(false)
        let done = Mutex(false)
        Thread {
            _ = try? client.connection.perform(method: "PATCH", url: url, headers: ["Content-Type: \(Tus.offsetContentType)", "Upload-Offset: 0"],
                                               body: .file(fd: fd, offset: 0, length: f.size), progress: { n in
                sent.withLock { $0 = n }
                if n >= 8 << 20 { started.withLock { $0 = true } }
                return true
            })
            done.withLock { $0 = true }
        }.start()
        while !started.withLock({ $0 }) { usleep(5_000) }
        server.stop()
        stopped = true
        while !done.withLock({ $0 }) { usleep(5_000) }

        let again = try WorkspaceServer(ServerConfiguration(dataDirectory: data, host: "127.0.0.1", port: 0))
        defer { again.stop() }
        let second = WorkspaceClient(baseURL: again.baseURL, token: token)
        guard case .upload(_, let offset, _) = try second.createUpload(hash: f.digest, size: f.size) else { throw TestFailure("expected upload") }
        #expect(offset > 0)
        #expect(offset <= sent.withLock { $0 })
        try second.uploadBlob(hash: f.digest, size: f.size, fd: fd)
        #expect(try second.presentHashes([f.digest]) == [f.digest])
    }
}

import Synchronization
