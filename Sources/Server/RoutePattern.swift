import Protocol

/// A request's route as the access log and the metrics name it: the path's pattern, with
/// the hashes and upload ids it carries replaced by their names (`/v1/blocks/{hash}`),
/// so that a label has a handful of values and a log line never carries a presigned
/// URL's signature (libmicrohttpd hands the path without its query anyway). A path the
/// API does not have is `other`: a scanner's paths must not grow the metrics' table.
/// The cases follow `Methods.allowed`, which says what each path answers.
enum RoutePattern: Int, CaseIterable, Sendable {
    case health, openAPI, metrics, presentContents, uploads, tus, tusUpload, files, fileVersions, changes, watermark
    case content, contentBlocks, block, blockChunks, blockVerify, blockPack, blockPackFetch
    case tree, treeChanges, treeTrash, treeRestore, treeNodeVersions
    case other

    var text: String {
        switch self {
        case .health: return API.health
        case .openAPI: return API.openAPI
        case .metrics: return API.metrics
        case .presentContents: return API.presentContents
        case .uploads: return API.uploads
        case .tus: return API.tus
        case .tusUpload: return API.tusPrefix + "{id}"
        case .files: return API.files
        case .fileVersions: return API.fileVersions
        case .changes: return API.changes
        case .watermark: return API.watermark
        case .content: return API.contentPrefix + "{hash}"
        case .contentBlocks: return API.contentPrefix + "{hash}" + API.blocksSuffix
        case .block: return API.blockPrefix + "{hash}"
        case .blockChunks: return API.blockPrefix + "{hash}" + API.chunksSuffix
        case .blockVerify: return API.blockPrefix + "{hash}" + API.verifySuffix
        case .blockPack: return API.blockPack
        case .blockPackFetch: return API.blockPackFetch
        case .tree: return API.tree
        case .treeChanges: return API.treeChanges
        case .treeTrash: return API.treeTrash
        case .treeRestore: return API.treeRestore
        case .treeNodeVersions: return API.treeNodePrefix + "{id}" + API.versionsSuffix
        case .other: return "other"
        }
    }

    /// The pattern `path` (no query) belongs to; it does not check the hash or id itself.
    init(path: String) {
        switch path {
        case API.health: self = .health
        case API.openAPI: self = .openAPI
        case API.metrics: self = .metrics
        case API.presentContents: self = .presentContents
        case API.uploads: self = .uploads
        case API.tus: self = .tus
        case API.files: self = .files
        case API.fileVersions: self = .fileVersions
        case API.changes: self = .changes
        case API.watermark: self = .watermark
        case API.tree: self = .tree
        case API.treeChanges: self = .treeChanges
        case API.treeTrash: self = .treeTrash
        case API.treeRestore: self = .treeRestore
        case API.blockPack: self = .blockPack
        case API.blockPackFetch: self = .blockPackFetch
        default:
            if path.hasPrefix(API.tusPrefix) {
                self = .tusUpload
            } else if path.hasPrefix(API.contentPrefix) {
                self = path.hasSuffix(API.blocksSuffix) ? .contentBlocks : .content
            } else if path.hasPrefix(API.blockPrefix) {
                if path.hasSuffix(API.chunksSuffix) { self = .blockChunks }
                else if path.hasSuffix(API.verifySuffix) { self = .blockVerify }
                else { self = .block }
            } else if path.hasPrefix(API.treeNodePrefix) && path.hasSuffix(API.versionsSuffix) {
                self = .treeNodeVersions
            } else {
                self = .other
            }
        }
    }
}
