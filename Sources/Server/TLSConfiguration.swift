import Crypto
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// The certificate and key `vdrive serve --tls-cert FILE --tls-key FILE` serves HTTPS
/// with (libmicrohttpd's built-in TLS, GnuTLS underneath). Both are read and checked
/// when the server starts: a missing file, a file that is not PEM, a key that is not
/// the certificate's or a certificate out of its validity dates is named then, not at
/// each client's failed handshake.
public struct TLSConfiguration: Sendable, Equatable {
    /// The certificate, PEM; the chain to the CA may follow it (certbot's fullchain.pem).
    public var certificatePEM: [UInt8]
    /// The unencrypted private key, PEM.
    public var keyPEM: [UInt8]
    public var certificateFile: String
    public var keyFile: String

    /// Why a certificate or key cannot be used. `isUnreadable` tells a missing or
    /// unreadable file (sysexits 66) from one that is there but wrong (78).
    public struct Problem: Error, Sendable, CustomStringConvertible {
        public let description: String
        public let isUnreadable: Bool
    }

    /// Reads and checks the pair. `allowExpired` lets a server start with an expired
    /// certificate (it says so): clients refuse it either way, and a server that stays
    /// up can still be reached with a renewed certificate after a restart.
    public static func load(certificateFile: String, keyFile: String, allowExpired: Bool = false) throws(Problem) -> TLSConfiguration {
        let certificate = try contents(certificateFile, what: "certificate", option: "--tls-cert")
        let key = try contents(keyFile, what: "private key", option: "--tls-key")
        let tls = TLSConfiguration(certificatePEM: certificate, keyPEM: key, certificateFile: certificateFile, keyFile: keyFile)
        if let problem = tls.problem, !(allowExpired && problem == .expired) {
            throw Problem(description: tls.describe(problem), isUnreadable: false)
        }
        return tls
    }

    /// What is wrong with the pair now, nil when nothing.
    public var problem: CertificatePair.Problem? { CertificatePair.check(certificate: certificatePEM, key: keyPEM) }

    public func describe(_ problem: CertificatePair.Problem) -> String {
        switch problem {
        case .noCertificate: return "--tls-cert \(certificateFile) holds no PEM certificate (-----BEGIN CERTIFICATE-----); give the certificate file (certbot: fullchain.pem)"
        case .noKey: return "--tls-key \(keyFile) holds no unencrypted PEM private key; give the key file (certbot: privkey.pem), decrypted with 'openssl pkey -in KEY -out KEY.plain'"
        case .keyMismatch: return "--tls-key \(keyFile) is not the private key of the certificate in --tls-cert \(certificateFile); give the key made with that certificate"
        case .expired: return "the certificate in --tls-cert \(certificateFile) has expired; renew it (certbot renew, or openssl x509 -req … -days N) and restart the server"
        case .notYetValid: return "the certificate in --tls-cert \(certificateFile) is not valid yet (its notBefore date is in the future); check the clock or the certificate"
        }
    }

    private static func contents(_ path: String, what: String, option: String) throws(Problem) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            throw Problem(description: "cannot read the TLS \(what) \(path) (\(option)): \(Errno.current); check the path and that the server's user may read it",
                          isUnreadable: true)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Problem(description: "cannot read the TLS \(what) \(path) (\(option)): \(Errno.current)", isUnreadable: true) }
            if n == 0 { break }
            bytes += buffer[0..<n]
            // A certificate chain is a few KiB; a file of megabytes is the wrong file.
            if bytes.count > 1 << 20 {
                throw Problem(description: "the TLS \(what) \(path) (\(option)) is larger than 1 MiB: not a PEM \(what)", isUnreadable: false)
            }
        }
        return bytes
    }
}
