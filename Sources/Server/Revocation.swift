import Protocol

/// Revocation that reaches every credential a device holds: its bearer token (checked
/// per request by the router) and the presigned tus URLs handed to it (each names its
/// device and token fingerprint, checked against the records on every request to the
/// URL). The check is one primary-key read of the device's row, in the same records
/// every server process shares, so a revocation bites on the next request in every
/// process: there is no cache to go stale. Presigned S3 PUTs are signed by the store,
/// which knows nothing of devices: they are short-lived (`objectPutExpiry`) and the
/// block only counts once the device verifies it, a token-authenticated call.
enum Revocation {
    static let code = "device_revoked"

    /// The 401 for a bearer token whose device was revoked; nil for an active device.
    static func refusal(_ device: Metadata.Device, challenge: [(String, String)]) -> HTTPResponse? {
        guard let revokedAt = device.revokedAt else { return nil }
        return .error(401, code, "device '\(device.name)' was revoked at \(revokedAt) (Unix time): its token and upload URLs no longer work; ask the server's operator for a new token ('vdrive serve device add \(device.name)')",
                      headers: challenge)
    }

    /// The `device` value signed into a presigned URL handed to `device`.
    static func urlParameter(_ device: Metadata.Device) -> String { "\(device.id).\(device.tokenFingerprint)" }
}

extension ServerContext {
    /// The 403 for a presigned URL whose device is revoked, re-issued a token since, or
    /// unnamed (a URL from before URLs named their device); nil when the URL may be used.
    /// Device-less URLs are refused rather than trusted: their client renews them (a 403
    /// on an upload URL makes it ask POST /v1/uploads again), which a revoked device cannot.
    func presignedRefusal(_ signed: Presigner.Signed, headers: [(String, String)], note: RequestNote? = nil) -> HTTPResponse? {
        let renew = "ask for a fresh URL with POST /v1/uploads"
        guard let text = signed.device, let dot = text.firstIndex(of: "."), let id = Int64(text[..<dot]) else {
            return .error(403, "forbidden", "the presigned URL names no device; \(renew)", headers: headers)
        }
        let fingerprint = String(text[text.index(after: dot)...])
        let state: Metadata.DeviceTokenState?
        do { state = try metadata.deviceTokenState(id: id) } catch { return ServerContext.failure(error).adding(headers) }
        guard let state else {
            return .error(403, Revocation.code, "the device this URL was handed to no longer exists; nothing was written", headers: headers)
        }
        if let revokedAt = state.revokedAt {
            return .error(403, Revocation.code, "device '\(state.name)' was revoked at \(revokedAt) (Unix time): its upload URLs no longer work; nothing was written",
                          headers: headers)
        }
        guard state.tokenHash?.hasPrefix(fingerprint) == true else {
            return .error(403, Revocation.code, "the URL was handed to device '\(state.name)' under a token revoked since; nothing was written; \(renew) with the current token",
                          headers: headers)
        }
        note?.device = state.name  // the URL's device, for the access log
        return nil
    }
}

extension Metadata {
    struct DeviceTokenState: Sendable {
        let name: String
        let tokenHash: String?
        let revokedAt: Int64?
    }

    /// The device's name, token hash and revocation time (a primary-key read).
    func deviceTokenState(id: Int64) throws -> DeviceTokenState? {
        try withSession { db in
            try db.queryOne("SELECT name, token_hash, revoked_at FROM devices WHERE id = ?", id) {
                DeviceTokenState(name: $0.string(0) ?? "", tokenHash: $0.string(1), revokedAt: $0.optionalInt64(2))
            }
        }
    }
}

extension ServerConfiguration {
    /// Lifetime of a presigned S3 PUT: at most 15 minutes (the store cannot be told of a
    /// revocation, so a revoked device's PUT URLs must die soon on their own); a device
    /// renews its plan when the URLs are about to expire.
    var objectPutExpiry: Int64 { min(uploadExpiry, 15 * 60) }
}
