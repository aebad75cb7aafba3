import Crypto
import ObjectStore
import Protocol
import Storage

/// `POST /v1/blocks/<hash>/verify`: a device PUT a block to the object store with its
/// presigned URL; the server reads it once, checks its SHA-256 against the name, and only
/// then records it present (offered for dedup to every device). Stateless: the object
/// store is the upload's only state, so any server process can answer.
enum BlockVerify {
    static func verify(hash: String, context: ServerContext) -> HTTPResponse {
        do {
            let digest = try Validation.hash(hash)
            if try context.metadata.blockSize(digest.hex) != nil {
                return .json(200, CreateUploadResponse(status: CreateUploadResponse.present))
            }
            guard let presigned = context.blocks.presigned else {
                return .error(404, "not_found", "the workspace has no block \(digest.hex); this server keeps blocks itself: send it by tus (the URL of POST /v1/uploads)")
            }
            switch try presigned.verify(digest) {
            case .absent:
                return .error(404, "not_found", "the object store has no block \(digest.hex): PUT it to the URL POST /v1/uploads gave (ask again for a fresh one), then verify")
            case .mismatch(let actual, let size):
                return .error(Tus.checksumMismatchStatus, "block_checksum_mismatch",
                              "the object PUT for block \(digest.hex) is \(size) bytes hashing to \(actual.hex): it was deleted; read the block again and start over (POST /v1/uploads)")
            // Chunk lists are not made here: a second hash over every byte would cost the
            // server a quarter more CPU per GB uploaded (measured, Docs/benchmarks.md), for
            // a list only partial reads of the block ever need (made on first request).
            case .verified(let size):
                // Held against the quota here, as a tus upload's last byte is: over it, the
                // object stays in the store and a later verify records it, nothing sent again.
                try context.recordingWithinQuota(size) { try context.recordBlock(digest, size: size, uploadID: nil) }
                return .json(201, CreateUploadResponse(status: CreateUploadResponse.present))
            }
        } catch let error as ObjectStoreError {
            return error.response
        } catch {
            return ServerContext.failure(error)
        }
    }
}
