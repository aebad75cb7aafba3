import Crypto
import Protocol

/// How one block of an upload plan is sent.
public enum UploadKind: Sendable, Equatable {
    /// tus PATCHes to the server's presigned URL, resumable mid-block (the embedded store).
    case tus
    /// One PUT of the whole block to the object store's presigned URL with these headers
    /// (signed: send them as they are), then `verifyBlock` (a scaled server).
    case s3(headers: [String])

    init(_ info: BlockUploadInfo) throws(ClientError) {
        switch info.kind {
        case BlockUploadInfo.tus: self = .tus
        case BlockUploadInfo.s3: self = .s3(headers: (info.headers ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" })
        default: throw .invalidResponse("create upload listed block \(info.index) with kind '\(info.kind)'; this client speaks tus and s3")
        }
    }
}

extension WorkspaceClient {
    /// Sends a whole block to the object store with its presigned PUT, then has the
    /// server verify it (`verifyBlock`). The store refuses an altered or expired URL
    /// (`.expired`: ask `createUpload` again) and bytes that do not match the signed
    /// `x-amz-checksum-sha256` (`.contentMismatch`). An S3 PUT is not resumable inside a
    /// block: a broken one is sent again whole (at most 4 MiB).
    public func putBlock(url: String, hash: SHA256Digest, headers: [String], body: RequestBodySource,
                         progress: ((Int64) -> Bool)? = nil) throws(ClientError) {
        let reply = try connection.perform(method: "PUT", url: url, headers: headers + ["Expect:"], body: body, progress: progress)
        try checkStore(reply, hash: hash)
        try verifyBlock(hash)
    }

    /// The same from bytes the caller already read (the backup uploader reads each block once).
    public func putBlock(url: String, hash: SHA256Digest, headers: [String], bytes: UnsafeRawBufferPointer,
                         progress: ((Int64) -> Bool)? = nil) throws(ClientError) {
        let reply = try connection.perform(method: "PUT", url: url, headers: headers + ["Expect:"], bytes: bytes, progress: progress)
        try checkStore(reply, hash: hash)
        try verifyBlock(hash)
    }

    /// Asks the server to check a block the device PUT to the object store and record it
    /// (`POST /v1/blocks/<hash>/verify`). `.notFound`: the store has no such object (send
    /// it); `.contentMismatch`: its bytes were not the block, and it was deleted.
    public func verifyBlock(_ hash: SHA256Digest) throws(ClientError) {
        let reply = try connection.perform(method: "POST", url: baseURL + API.blockPrefix + hash.hex + API.verifySuffix,
                                           headers: [try authHeader(), "Expect:"], body: .bytes([]))
        try check(reply, expect: [200, 201])
    }

    /// Maps an object store's reply to a PUT (S3's XML errors) onto `ClientError`.
    private func checkStore(_ reply: HTTPResult, hash: SHA256Digest) throws(ClientError) {
        if reply.status == 200 { return }
        let text = String(decoding: reply.body.prefix(600), as: UTF8.self)
        let code = text.firstRange(of: "<Code>").flatMap { open in
            text[open.upperBound...].firstRange(of: "</Code>").map { String(text[open.upperBound..<$0.lowerBound]) }
        } ?? ""
        switch (reply.status, code) {
        case (403, _): throw .expired
        case (400, "BadDigest"), (400, "XAmzContentSHA256Mismatch"), (400, "InvalidDigest"), (400, "XAmzContentChecksumMismatch"):
            throw .contentMismatch("the object store refused block \(hash.hex): its bytes do not match its SHA-256 (\(code)); re-read the block")
        default:
            throw .http(status: reply.status, message: "the object store answered \(reply.status) \(code) to the PUT of block \(hash.hex)")
        }
    }
}
