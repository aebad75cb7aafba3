/// Device names in query arguments (`GET /v1/files?device=`, `/v1/files/versions`):
/// the rule `vdrive serve device add` enforces, stated once for the OpenAPI document
/// and the server's check, like the other `WirePatterns`.
extension WirePatterns {
    /// 1 to 64 letters, digits, `.`, `_` or `-` (so never a `/`: listing cursors rely on it).
    static let deviceName = "^[A-Za-z0-9._-]{1,64}$"
}

extension HTTPRequest {
    /// The `device` query argument, checked against `WirePatterns.deviceName`; nil when absent.
    func deviceName() throws(RequestFailure) -> String? {
        guard let name = query["device"] else { return nil }
        guard WirePatterns.matches(WirePatterns.deviceName, name) else {
            throw RequestFailure(400, "bad_request", "'device' must be a device name (1-64 letters, digits, '.', '_' or '-'), got '\(name)'", field: "device")
        }
        return name
    }
}
