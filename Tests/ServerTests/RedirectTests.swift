import Client
import Crypto
import Foundation
import Testing

/// The client follows a scaled server's 307 to its object store without the device's
/// bearer token (a store must never see it). The two peers here are one raw loopback
/// listener that records each request's head: the first answer is the redirect, the
/// second the block. (The real path, server and SeaweedFS, is in ScaledStoreTests.)
@Suite(.tags(.logic)) struct RedirectTests {
    /// Answers its replies in order, one per connection, and keeps each request's head.
    final class RecordingPeer: @unchecked Sendable { // `heads` is read after the thread is joined
        let fd: Int32
        let port: Int
        private(set) var heads: [String] = []
        private var thread: Thread?

        init(replies makeReplies: (_ port: Int) -> [[UInt8]]) throws {
            port = try freeLoopbackPorts(1)[0]
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            addr.sin_port = UInt16(port).bigEndian
            let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard bound == 0, listen(fd, 4) == 0 else { throw TestFailure("cannot listen on 127.0.0.1:\(port)") }
            let replies = makeReplies(port)
            thread = Thread { [self] in
                for reply in replies {
                    let client = accept(fd, nil, nil)
                    guard client >= 0 else { return }
                    var head: [UInt8] = []
                    var byte: UInt8 = 0
                    while read(client, &byte, 1) == 1 {
                        head.append(byte)
                        if head.suffix(4) == [13, 10, 13, 10] { break }
                    }
                    heads.append(String(decoding: head, as: UTF8.self))
                    reply.withUnsafeBytes { _ = write(client, $0.baseAddress, $0.count) }
                    close(client)
                }
            }
            thread?.start()
        }

        func wait() throws { try eventually("the peer has answered every request") { thread?.isFinished != false } }
        deinit { close(fd) }
    }

    /// A scaled server's answer to a block read: 307 to `location`.
    static func redirect(to location: String) -> [UInt8] {
        Array("HTTP/1.1 307 Temporary Redirect\r\nLocation: \(location)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
    }

    /// The store's presigned GET of `hash` on the peer itself.
    static func storeURL(_ port: Int, _ hash: SHA256Digest) -> String {
        "http://127.0.0.1:\(port)/bucket/blocks/\(hash.hex)?X-Amz-Signature=abc"
    }

    @Test func aRedirectToTheStoreIsFollowedWithoutTheToken() throws {
        let block = Array("the block's bytes".utf8)
        let hash = SHA256Hasher.digest(block)
        let peer = try RecordingPeer { port in [
            Self.redirect(to: Self.storeURL(port, hash)),
            Array("HTTP/1.1 200 OK\r\nContent-Length: \(block.count)\r\nConnection: close\r\n\r\n".utf8) + block,
        ] }
        let client = WorkspaceClient(baseURL: "http://127.0.0.1:\(peer.port)", token: "secret-device-token")
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fd = open(dir.path + "/block", O_RDWR | O_CREAT, 0o600); defer { close(fd) }
        #expect(try client.downloadBlock(hash, to: fd) == Int64(block.count))
        try peer.wait()
        #expect(peer.heads.count == 2)
        #expect(peer.heads.first?.contains("Authorization: Bearer secret-device-token") == true, "the server gets the token")
        #expect(peer.heads.last?.hasPrefix("GET /bucket/blocks/\(hash.hex)?X-Amz-Signature=abc ") == true, "\(peer.heads.last ?? "")")
        #expect(peer.heads.last?.lowercased().contains("authorization") == false, "the store never gets the token: \(peer.heads.last ?? "")")
    }

    /// The drive's partial read of a block (a chunk of it) goes to the store too, with its
    /// Range and without the token.
    @Test func aRangeOfABlockFollowsTheRedirectWithItsRangeAndWithoutTheToken() throws {
        let block = Array("0123456789abcdef".utf8)
        let hash = SHA256Hasher.digest(block)
        let peer = try RecordingPeer { port in [
            Self.redirect(to: Self.storeURL(port, hash)),
            Array("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 4-9/16\r\nContent-Length: 6\r\nConnection: close\r\n\r\n".utf8) + block[4...9],
        ] }
        let client = WorkspaceClient(baseURL: "http://127.0.0.1:\(peer.port)", token: "secret-device-token")
        #expect(try client.blockBytes(hash, offset: 4, length: 6) == Array(block[4...9]))
        try peer.wait()
        #expect(peer.heads.count == 2)
        #expect(peer.heads.first?.contains("Range: bytes=4-9") == true, "\(peer.heads.first ?? "")")
        #expect(peer.heads.last?.hasPrefix("GET /bucket/blocks/\(hash.hex)?X-Amz-Signature=abc ") == true, "\(peer.heads.last ?? "")")
        #expect(peer.heads.last?.contains("Range: bytes=4-9") == true, "the store gets the Range: \(peer.heads.last ?? "")")
        #expect(peer.heads.last?.lowercased().contains("authorization") == false, "the store never gets the token: \(peer.heads.last ?? "")")
    }

    /// A redirect anywhere but an absolute http or https URL is refused as a wrong reply,
    /// never followed: one request per call, and a local file holding the very block is
    /// not opened.
    @Test func aRedirectOutsideHTTPIsNotFollowed() throws {
        let block = Array("a block".utf8)
        let hash = SHA256Hasher.digest(block)
        let dir = TemporaryDirectory(); defer { dir.remove() }
        writeFile(dir.path + "/held", block)
        let fd = open(dir.path + "/block", O_RDWR | O_CREAT, 0o600); defer { close(fd) }
        for location in ["file://" + dir.path + "/held", "ftp://127.0.0.1:1/bucket/blocks/x", "gopher://127.0.0.1:1/x", "/v1/blocks/x", ""] {
            let peer = try RecordingPeer { _ in [Self.redirect(to: location), Self.redirect(to: location)] }
            let client = WorkspaceClient(baseURL: "http://127.0.0.1:\(peer.port)", token: "secret-device-token")
            let calls: [(String, () throws(ClientError) -> Void)] = [
                ("a range", { () throws(ClientError) in _ = try client.blockBytes(hash, offset: 0, length: 4) }),
                ("a whole block", { () throws(ClientError) in try client.downloadBlock(hash, to: fd) }),
            ]
            for (what, call) in calls {
                let error = ScaledStoreTests.outcome(call)
                guard case .invalidResponse? = error else { Issue.record("\(what), redirected to '\(location)': \(String(describing: error))"); continue }
            }
            try peer.wait()
            #expect(peer.heads.count == 2, "one request per call: \(peer.heads)")
        }
    }

    /// An upload plan names only http or https URLs: a presigned URL of another scheme is
    /// never opened (a `file:` PUT or PATCH would write the device's own disk).
    @Test func anUploadURLOutsideHTTPIsNeverOpened() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let block = Array("a block".utf8)
        writeFile(dir.path + "/source", block)
        let fd = open(dir.path + "/source", O_RDONLY); defer { close(fd) }
        let client = WorkspaceClient(baseURL: "http://127.0.0.1:1", token: "secret-device-token")
        for kind in [UploadKind.tus, .s3(headers: [])] {
            let ticket = BlockTicket(index: 0, hash: SHA256Hasher.digest(block), length: Int64(block.count),
                                     url: "file://" + dir.path + "/written", offset: 0, kind: kind)
            let error = ScaledStoreTests.outcome { () throws(ClientError) in try client.uploadBlock(ticket, fd: fd) }
            if case .invalidResponse? = error {} else { Issue.record("\(kind): \(String(describing: error))") }
            #expect(!FileManager.default.fileExists(atPath: dir.path + "/written"), "\(kind): nothing written")
        }
    }
}
