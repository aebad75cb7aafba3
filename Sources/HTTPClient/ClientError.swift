/// HTTPClient: HTTP/1.1 requests over libcurl, for the device's client (`Client`) and the
/// server's object-store calls (`ObjectStore`). The one target that imports CCurl.
///
/// Terms: `HTTPConnection` is a pool of reusable libcurl easy handles (each keeps its
/// connection alive between calls); `HTTPResult` a reply; `ClientError` why a call failed.
/// Thread safety: `HTTPConnection.perform` may be called from many threads at once (each
/// call takes a handle of its own).
/// Imports: CCurl (CurlEasy.swift only), Crypto (digests in errors).

import Crypto

/// Why a call failed. `isTransient` says whether trying again later can help.
public enum ClientError: Error, Equatable, Sendable, CustomStringConvertible {
    /// No connection: refused, name not resolved, or the connection broke mid-call. Transient.
    case unreachable(String)
    /// The connect timeout or the low-speed timeout fired. Transient.
    case timedOut
    /// Any other HTTP error, with the server's message. Transient for 5xx, 408 and 429.
    case http(status: Int, message: String)
    /// 403 on a presigned URL: it expired or was altered. Ask `createUpload` again for a fresh URL.
    case expired
    /// 404: the upload (terminated, expired and swept), content or block does not exist.
    case notFound
    /// 409 on PATCH: the server's offset differs (or another request is writing this
    /// upload). Resume from `serverOffset` (or `uploadOffset(url:)` when nil). Transient.
    case offsetConflict(serverOffset: Int64?)
    /// 460: the chunk arrived damaged (its Upload-Checksum did not match). Send it again. Transient.
    case checksumMismatch
    /// The uploaded or downloaded bytes do not hash to the block's (or content's) hash
    /// (the local file changed since it was hashed, or a download was damaged). Re-hash
    /// before retrying. Permanent.
    case contentMismatch(String)
    /// 409 on recording a file: the server lacks these blocks of its content (an upload
    /// expired, or was never finished). Ask `createUpload` again and send them. Transient.
    case missingBlocks([SHA256Digest])
    /// The server's reply was not what the protocol says.
    case invalidResponse(String)
    /// Reading or writing the local file failed.
    case localIO(String)
    /// The progress callback asked to stop.
    case cancelled
    /// The connection could not be made safely: the server's TLS certificate was refused
    /// (unknown CA, expired, another name), or a token would have crossed plain HTTP to
    /// another machine. Permanent until the configuration changes.
    case insecure(String)

    public var isTransient: Bool {
        switch self {
        case .unreachable, .timedOut, .offsetConflict, .checksumMismatch, .missingBlocks: return true
        case .http(let status, _): return status >= 500 || status == 408 || status == 429
        case .expired, .notFound, .contentMismatch, .invalidResponse, .localIO, .cancelled, .insecure: return false
        }
    }

    public var description: String {
        switch self {
        case .unreachable(let m): return "the workspace server is unreachable: \(m); check that it runs and the URL is right"
        case .timedOut: return "the workspace server did not answer in time (connect or low-speed timeout); will retry"
        case .http(let status, let m): return "the workspace server answered \(status): \(m)"
        case .expired: return "the presigned upload URL expired or was altered; ask for a fresh one (createUpload)"
        case .notFound: return "the upload, content or block does not exist on the server; create the upload again"
        case .offsetConflict(let o): return "the server's upload offset is \(o.map(String.init) ?? "different"); resume from there"
        case .checksumMismatch: return "the chunk arrived damaged (checksum mismatch); send it again"
        case .contentMismatch(let m): return m
        case .missingBlocks(let b): return "the server lacks \(b.count) block(s) of the content; ask for the upload plan again and send them"
        case .invalidResponse(let m): return "the workspace server sent an unexpected reply: \(m)"
        case .localIO(let m): return m
        case .cancelled: return "the transfer was cancelled"
        case .insecure(let m): return m
        }
    }
}
