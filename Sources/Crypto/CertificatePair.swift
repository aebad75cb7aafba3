import CCrypto

/// A TLS certificate (PEM, possibly followed by its chain) and its private key (PEM),
/// checked with OpenSSL before a server hands them to its TLS library, so that a wrong
/// file is named at start rather than failing every handshake.
public enum CertificatePair {
    public enum Problem: Error, Equatable, Sendable {
        case noCertificate
        case noKey
        case keyMismatch
        case expired
        case notYetValid
    }

    /// Nil when the pair can serve now.
    public static func check(certificate: [UInt8], key: [UInt8]) -> Problem? {
        let code = certificate.withUnsafeBufferPointer { c in
            key.withUnsafeBufferPointer { k in
                c.withMemoryRebound(to: CChar.self) { c in
                    k.withMemoryRebound(to: CChar.self) { k in
                        vd_tls_pair_check(c.baseAddress, Int32(c.count), k.baseAddress, Int32(k.count))
                    }
                }
            }
        }
        switch code {
        case 0: return nil
        case 1: return .noCertificate
        case 2: return .noKey
        case 3: return .keyMismatch
        case 4: return .expired
        default: return .notYetValid
        }
    }
}
