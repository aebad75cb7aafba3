import Protocol

/// The methods each path of the API answers: the source of every 405 reply's `Allow`
/// header (RFC 9110 requires it), checked before authentication and before a presigned
/// URL's signature, so a method the path never answers is a 405 whoever asks. The
/// OpenAPI document declares exactly these operations (ContractTests check both).
enum Methods {
    /// The allowed methods on `path`, or nil for a path the API does not have (404).
    static func allowed(on path: String) -> [String]? {
        switch path {
        case API.health: return ["GET", "HEAD"]
        case API.openAPI: return ["GET"]
        case API.metrics: return ["GET"]
        case API.presentContents: return ["POST"]
        case API.uploads: return ["POST"]
        case API.tus: return ["POST", "OPTIONS"]
        case API.files: return ["GET", "POST"]
        case API.fileVersions: return ["GET"]
        case API.changes: return ["GET"]
        case API.watermark: return ["GET", "PUT"]
        case API.tree, API.treeTrash: return ["GET"]
        case API.treeChanges, API.treeRestore, API.blockPack, API.blockPackFetch: return ["POST"]
        default: break
        }
        if path.hasPrefix(API.treeNodePrefix) { return path.hasSuffix(API.versionsSuffix) ? ["GET"] : nil }
        if path.hasPrefix(API.tusPrefix) { return ["HEAD", "PATCH", "DELETE", "OPTIONS"] }
        if path.hasPrefix(API.contentPrefix) { return path.hasSuffix(API.blocksSuffix) ? ["GET"] : ["GET", "HEAD"] }
        if path.hasPrefix(API.blockPrefix) {
            let rest = path.dropFirst(API.blockPrefix.count)
            if rest.hasSuffix(API.chunksSuffix) { return ["GET"] }
            if rest.hasSuffix(API.verifySuffix) { return ["POST"] }
            return ["GET", "HEAD", "PUT"]
        }
        return nil
    }

    /// 405 naming the path's methods in `Allow`, or nil when `method` is one of them
    /// (or the path is not one of ours: the router answers 404 or a newer handler takes it).
    static func refusal(_ method: String, on path: String) -> HTTPResponse? {
        guard let allowed = allowed(on: path), !allowed.contains(method) else { return nil }
        let list = allowed.joined(separator: ", ")
        return .error(405, "method_not_allowed", "\(method) is not allowed on \(path); it answers \(list) (see GET /v1/openapi.json)",
                      headers: [("Allow", list)])
    }
}
