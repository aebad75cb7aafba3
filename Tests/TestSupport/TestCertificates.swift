import Foundation

/// Certificates for TLS tests and benchmarks, made with the `openssl` command in `dir`:
/// a private CA, a server certificate for 127.0.0.1 and localhost signed by it, one
/// self-signed for the same names, one signed by the CA but expired, and one signed by
/// the CA for another name. Each server certificate's key is `<name>.key` beside it.
public struct TestCertificates: Sendable {
    public let dir: String
    /// The CA's certificate: the client's `caFile`.
    public var ca: String { dir + "/ca.pem" }
    public var server: Pair { Pair(dir: dir, name: "server") }
    public var selfSigned: Pair { Pair(dir: dir, name: "self-signed") }
    public var expired: Pair { Pair(dir: dir, name: "expired") }
    public var otherName: Pair { Pair(dir: dir, name: "other-name") }

    public struct Pair: Sendable {
        public let certificate: String
        public let key: String
        init(dir: String, name: String) { certificate = "\(dir)/\(name).pem"; key = "\(dir)/\(name).key" }
    }

    public init(in dir: String) throws {
        self.dir = dir
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try Self.openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", dir + "/ca.key",
                          "-out", ca, "-days", "2", "-subj", "/CN=vdrive test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                          "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        let local = "subjectAltName=IP:127.0.0.1,DNS:localhost"
        try make("server", names: local, days: 2, signer: .ca)
        try make("self-signed", names: local, days: 2, signer: .itself)
        // -days -1: notAfter a day before notBefore (now), so expired from the start.
        try make("expired", names: local, days: -1, signer: .ca)
        try make("other-name", names: "subjectAltName=DNS:other.example", days: 2, signer: .ca)
    }

    private enum Signer { case ca, itself }

    private func make(_ name: String, names: String, days: Int, signer: Signer) throws {
        let p = Pair(dir: dir, name: name), request = "\(dir)/\(name).csr", extensions = "\(dir)/\(name).ext"
        try Data("\(names)\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n".utf8).write(to: URL(fileURLWithPath: extensions))
        try Self.openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", p.key,
                          "-out", request, "-subj", "/CN=\(name)"])
        let signing = signer == .ca ? ["-CA", ca, "-CAkey", dir + "/ca.key", "-CAcreateserial"] : ["-signkey", p.key]
        try Self.openssl(["x509", "-req", "-in", request, "-out", p.certificate, "-days", String(days), "-extfile", extensions] + signing)
    }

    private static func openssl(_ arguments: [String]) throws {
        let path = ["/usr/bin/openssl", "/bin/openssl", "/usr/local/bin/openssl"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let path else { throw CertificateToolMissing() }
        let r = try runCommand(path, arguments)
        if r.status != 0 { throw CertificateToolFailed(arguments: arguments, stderr: r.stderr) }
    }
}

public struct CertificateToolMissing: Error, CustomStringConvertible {
    public var description: String { "the openssl command is not installed; Tests/run installs it (apt-get install openssl)" }
}

public struct CertificateToolFailed: Error, CustomStringConvertible {
    let arguments: [String]
    let stderr: String
    public var description: String { "openssl \(arguments.joined(separator: " ")) failed: \(stderr)" }
}
