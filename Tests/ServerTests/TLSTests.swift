import Client
import Crypto
import Foundation
import HTTPClient
import Protocol
import Server
import Storage
import Testing

/// HTTPS end to end: `vdrive serve --tls-cert/--tls-key` (and the in-process server with
/// a `TLSConfiguration`) against clients that verify the certificate, trusting a private
/// CA given as a file. Certificates are made per test with `openssl` (TestCertificates).
@Suite(.tags(.endToEnd), .serialized) struct TLSTests {
    func tls(_ pair: TestCertificates.Pair, allowExpired: Bool = false) throws -> TLSConfiguration {
        try TLSConfiguration.load(certificateFile: pair.certificate, keyFile: pair.key, allowExpired: allowExpired)
    }

    /// What the client says when it refuses the server's TLS, nil when it connected.
    func refusal(_ client: WorkspaceClient) -> String? {
        do {
            _ = try client.health()
            return nil
        } catch .insecure(let message) {
            return message
        } catch {
            return "not a TLS refusal: \(error)"
        }
    }

    @Test func deviceBacksUpThroughTLSAndReadsBack() throws {
        let certificates = TemporaryDirectory()
        defer { certificates.remove() }
        let pki = try TestCertificates(in: certificates.path)
        let s = try TestServer(tls: try tls(pki.server), caFile: pki.ca)
        defer { s.stop() }
        #expect(s.base.hasPrefix("https://127.0.0.1:"))

        let f = TestFile(in: s.dir.path, size: Blocks.size + 123_457, seed: 41)
        guard case .blocks(let tickets, _) = try s.client.createUpload(content: f.content, size: f.size, blocks: f.manifest.blocks) else {
            throw TestFailure("expected blocks to upload")
        }
        // Presigned URLs follow the scheme the server is reached by.
        #expect(tickets.count == 2)
        #expect(tickets.allSatisfy { $0.url.hasPrefix("https://127.0.0.1:\(s.server.port)/") }, "\(tickets.map(\.url))")
        try s.store(f, at: "Camera Roll/IMG_TLS.jpg")
        #expect(try s.client.listFiles(prefix: "Camera Roll/").map(\.path) == ["Camera Roll/IMG_TLS.jpg"])

        let back = s.dir.path + "/back"
        let out = open(back, O_RDWR | O_CREAT | O_TRUNC, 0o600)
        defer { close(out) }
        #expect(try s.client.download(content: f.content, to: out) == f.size)
        #expect(FileManager.default.contents(atPath: back).map(Array.init) == f.bytes)

        // The TLS port does not answer plain HTTP.
        let plain = WorkspaceClient(baseURL: s.base.replacingOccurrences(of: "https://", with: "http://"), token: s.token,
                                    timeouts: Timeouts(connect: 3, lowSpeedBytes: 1, lowSpeedSeconds: 5))
        #expect(throws: ClientError.self) { try plain.health() }
    }

    @Test func clientsRefuseCertificatesTheyCannotTrust() throws {
        let certificates = TemporaryDirectory()
        defer { certificates.remove() }
        let pki = try TestCertificates(in: certificates.path)

        // The private CA's server, without the CA: the system's CAs do not know it.
        let s = try TestServer(tls: try tls(pki.server), caFile: pki.ca)
        defer { s.stop() }
        #expect(refusal(s.client) == nil)
        let withoutCA = try #require(refusal(WorkspaceClient(baseURL: s.base, token: s.token)))
        #expect(withoutCA.contains("https://127.0.0.1:\(s.server.port)") && withoutCA.contains("--ca-file"), "\(withoutCA)")
        #expect(withoutCA.contains("local issuer"), "\(withoutCA)")
        // A CA file that is not there is named.
        let missing = try #require(refusal(WorkspaceClient(baseURL: s.base, token: s.token, caFile: certificates.path + "/no-such-ca.pem")))
        #expect(missing.contains("no-such-ca.pem"), "\(missing)")
        // The token is never sent on a refused connection: a token call fails the same way.
        #expect(throws: ClientError.self) { try WorkspaceClient(baseURL: s.base, token: s.token).listFiles(prefix: "") }

        let cases: [(TestCertificates.Pair, String)] = [(pki.selfSigned, "self-signed"), (pki.otherName, "name"), (pki.expired, "expired")]
        for (pair, word) in cases {
            let bad = try TestServer(tls: try tls(pair, allowExpired: true), caFile: pki.ca)
            defer { bad.stop() }
            let message = try #require(refusal(bad.client), "\(pair.certificate) was accepted")
            #expect(message.contains(word) && message.hasPrefix("TLS connection to https://127.0.0.1:"), "\(pair.certificate): \(message)")
        }
    }

    @Test func tokenOverPlainHTTPToAnotherMachineIsRefusedUnlessAllowed() throws {
        // 192.0.2.1 (TEST-NET-1) is never a real host: a connection there hangs or fails.
        let url = "http://192.0.2.1:8420"
        let quick = Timeouts(connect: 1, lowSpeedBytes: 1, lowSpeedSeconds: 2)
        do {
            _ = try WorkspaceClient(baseURL: url, token: "t", timeouts: quick).listFiles(prefix: "")
            Issue.record("the token was sent over plain HTTP")
        } catch .insecure(let message) {
            // Refused before any connection: no connect timeout, no unreachable host.
            #expect(message.contains(url) && message.contains("--allow-insecure-http"), "\(message)")
        } catch {
            Issue.record("expected a refusal before connecting, got \(error)")
        }
        do {
            _ = try WorkspaceClient(baseURL: url, token: "t", timeouts: quick, allowInsecureHTTP: true).listFiles(prefix: "")
            Issue.record("192.0.2.1 answered")
        } catch .unreachable, .timedOut {
            // Attempted: the connection was tried and failed.
        } catch {
            Issue.record("expected an attempted connection, got \(error)")
        }
        for loopback in ["http://127.0.0.1:8420", "http://127.1.2.3", "http://localhost:8420/", "http://[::1]:8420", "https://192.0.2.1"] {
            #expect(PlainHTTP.refusal(baseURL: loopback) == nil, "\(loopback)")
        }
        for other in ["http://192.0.2.1", "HTTP://example.com:80", "http://127.0.0.1.example.com", "http://user@10.0.0.1:8420", "http://[2001:db8::1]:8420"] {
            #expect(PlainHTTP.refusal(baseURL: other) != nil, "\(other)")
        }
    }

    @Test func serveAndCheckNameAMissingOrWrongCertificateOrKey() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let pki = try TestCertificates(in: dir.path + "/pki")
        let data = ["--data", dir.path + "/data"]
        func serve(_ arguments: [String]) throws -> CommandResult {
            try runCommand(vdriveBinary(), ["serve"] + data + ["--listen", "127.0.0.1:0"] + arguments)
        }
        func check(_ arguments: [String]) throws -> CommandResult {
            try runCommand(vdriveBinary(), ["serve", "check"] + data + arguments)
        }
        let missing = dir.path + "/missing.key"
        for r in [try serve(["--tls-cert", pki.server.certificate, "--tls-key", missing]),
                  try check(["--tls-cert", pki.server.certificate, "--tls-key", missing])] {
            #expect(r.status == 66 && r.stderr.contains(missing) && r.stderr.contains("--tls-key"), "\(r.status) \(r.stderr)")
        }
        let mismatched = ["--tls-cert", pki.server.certificate, "--tls-key", pki.otherName.key]
        for r in [try serve(mismatched), try check(mismatched)] {
            #expect(r.status == 78 && r.stderr.contains("is not the private key of the certificate"), "\(r.status) \(r.stderr)")
        }
        let notACertificate = try serve(["--tls-cert", pki.server.key, "--tls-key", pki.server.key])
        #expect(notACertificate.status == 78 && notACertificate.stderr.contains("holds no PEM certificate"), "\(notACertificate.stderr)")
        let half = try serve(["--tls-cert", pki.server.certificate])
        #expect(half.status == 64 && half.stderr.contains("--tls-key"), "\(half.stderr)")

        let expired = try check(["--tls-cert", pki.expired.certificate, "--tls-key", pki.expired.key])
        #expect(expired.status == 78 && expired.stderr.contains("has expired"), "\(expired.status) \(expired.stderr)")
        let good = try check(["--tls-cert", pki.server.certificate, "--tls-key", pki.server.key])
        #expect(good.status == 0 && good.stdout.contains("tls: certificate \(pki.server.certificate)"), "\(good.status) \(good.stdout) \(good.stderr)")
    }

    /// The command line end to end: `vdrive serve` over TLS, `vdrive restore --ca-file`.
    @Test func restoreThroughTLSWithTheCAFile() throws {
        let dir = TemporaryDirectory()
        defer { dir.remove() }
        let pki = try TestCertificates(in: dir.path + "/pki")
        let data = dir.path + "/data"
        let token = try DeviceRegistry(dataDirectory: data).add("phone")
        let tokenFile = dir.path + "/phone.token"
        writeFile(tokenFile, Array(token.utf8))
        let server = try ServerProcess(data: data, extra: ["--tls-cert", pki.server.certificate, "--tls-key", pki.server.key])
        defer { server.kill(SIGTERM) }
        let base = "https://127.0.0.1:\(server.port)"
        let phone = WorkspaceClient(baseURL: base, token: token, caFile: pki.ca)
        let f = TestFile(in: dir.path, size: 300_001, seed: 77)
        let fd = f.open()
        defer { close(fd) }
        try phone.uploadFile(fd: fd, size: f.size)
        try phone.recordFile(FileRecord(path: "Camera Roll/IMG_0001.jpg", hash: f.content.hex, size: f.size, blocks: f.manifest.blocks.map(\.hex),
                                        captureDate: nil, mtime: 1_600_000_000, deviceSequence: 1))

        // No policy of this machine, no remote.json of the user running the tests.
        let isolation = ["VDRIVE_SYSTEM_ROOT": dir.path + "/no-system", "XDG_CONFIG_HOME": dir.path + "/config"]
        func restore(_ server: String, _ extra: [String]) throws -> CommandResult {
            try runCommand(vdriveBinary(), ["restore", "phone", dir.path + "/restored", "--config", dir.path + "/settings.json",
                                            "--server", server, "--token-file", tokenFile] + extra, environment: isolation)
        }
        let untrusted = try restore(base, [])
        #expect(untrusted.status == 78 && untrusted.stderr.contains("--ca-file"), "\(untrusted.status) \(untrusted.stderr)")
        let restored = try restore(base, ["--ca-file", pki.ca])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(FileManager.default.contents(atPath: dir.path + "/restored/Camera Roll/IMG_0001.jpg").map(Array.init) == f.bytes)

        let plain = try restore("http://192.0.2.1:8420", [])
        #expect(plain.status == 78 && plain.stderr.contains("http://192.0.2.1:8420") && plain.stderr.contains("--allow-insecure-http"),
                "\(plain.status) \(plain.stderr)")
        let missingCA = try restore(base, ["--ca-file", dir.path + "/nope.pem"])
        #expect(missingCA.status == 66 && missingCA.stderr.contains("nope.pem"), "\(missingCA.status) \(missingCA.stderr)")
    }
}
