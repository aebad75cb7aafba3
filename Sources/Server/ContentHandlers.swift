import Crypto
import Protocol
import Storage

/// Whole-file dedup (`POST /v1/contents/present`) and manifests
/// (`GET /v1/contents/<hash>/blocks`).
enum ContentHandlers {
    /// The subset of the asked content hashes whose verified manifest the workspace holds.
    static func present(_ body: PresentRequest, context: ServerContext) -> HTTPResponse {
        guard body.hashes.count <= API.maxHashesPerCheck else {
            // 400, not 413: the list breaks the document's maxItems; the body itself fits.
            return .error(400, "too_many_hashes", "at most \(API.maxHashesPerCheck) hashes per call, got \(body.hashes.count); split the list", field: "hashes")
        }
        var hexes: [String] = []
        hexes.reserveCapacity(body.hashes.count)
        for (i, text) in body.hashes.enumerated() {
            guard let d = SHA256Digest(hex: text) else {
                return .error(400, "bad_request", "hashes.\(i) is not a SHA-256 (64 hex digits)", field: "hashes.\(i)")
            }
            hexes.append(d.hex)
        }
        do {
            let present = try context.metadata.presentContents(hexes)
            return HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: .bytes(WireJSON.hashList("present", present)))
        } catch {
            return ServerContext.failure(error)
        }
    }

    /// A content's size and block list (zero blocks included, with their real digests).
    static func blocks(hash: String, context: ServerContext) -> HTTPResponse {
        do {
            let digest = try Validation.hash(hash)
            guard let manifest = try context.metadata.manifest(digest) else {
                return .error(404, "not_found", "the workspace has no content \(digest.hex)")
            }
            return .json(200, ContentBlocksResponse(content: digest.hex, size: manifest.size, blocks: manifest.blocks.map(\.hex)))
        } catch {
            return ServerContext.failure(error)
        }
    }
}
