/// Protocol: the wire format shared by the workspace client and server.
///
/// Terms: a *device* authenticates with a bearer token; a *block* is up to 4 MiB of
/// a file at a 4 MiB-aligned offset, content addressed by its SHA-256 (64 lowercase
/// hex digits); a *content* is a file's bytes, named by its *content hash* (SHA-256
/// of its block digests, `Crypto.ContentHash`) and described by its *manifest*
/// (size and block list); an *upload* is a tus resource that becomes a block once
/// its last byte lands and the bytes hash to the block's hash; a *file record* maps
/// a device's workspace path to a content, and each content recorded for a (device,
/// path) is a *version* of it (all kept); the *server sequence* orders file records for the
/// change feed; a device's *watermark* is its backup cursor.
/// Thread safety: every type here is a value type and `Sendable`.
/// Imports: Crypto (for HMAC in `Presign`), Foundation (JSON coding only).
import Foundation

/// The path prefix of every API call.
public enum API {
    public static let version = "v1"
    public static let health = "/v1/health"
    public static let openAPI = "/v1/openapi.json"
    public static let presentContents = "/v1/contents/present"
    /// `/v1/contents/<hash>` (bytes) and `/v1/contents/<hash>/blocks` (manifest).
    public static let contentPrefix = "/v1/contents/"
    public static let blocksSuffix = "/blocks"
    /// `/v1/blocks/<hash>`: one stored block.
    public static let blockPrefix = "/v1/blocks/"
    /// `POST /v1/blocks/<hash>/verify`: the server checks a block a device PUT to the object store.
    public static let verifySuffix = "/verify"
    public static let uploads = "/v1/uploads"
    public static let tus = "/v1/tus"
    public static let tusPrefix = "/v1/tus/"
    public static let files = "/v1/files"
    /// `GET /v1/files/versions?device=&path=`: every version of one device's path.
    public static let fileVersions = "/v1/files/versions"
    public static let changes = "/v1/changes"
    public static let watermark = "/v1/watermark"
    /// `GET /metrics`: the server's counters for Prometheus (outside `/v1`: it is the
    /// operator's, not the devices').
    public static let metrics = "/metrics"

    /// At most this many hashes per dedup check.
    public static let maxHashesPerCheck = 10_000
    /// JSON request bodies larger than this are refused with 413 before being read.
    public static let maxJSONBody = 1 << 20
    /// At most this many blocks in one manifest: 1 TiB in 4 MiB blocks.
    public static let maxBlocksPerContent = 262_144
    /// The largest content: `maxBlocksPerContent` blocks of 4 MiB (1 TiB).
    public static let maxContentSize: Int64 = Int64(maxBlocksPerContent) * 4_194_304
    /// Bodies that carry a block list (`POST /v1/uploads`, `POST /v1/files`) may be this
    /// large: a full list of `maxBlocksPerContent` hex digests is about 17.6 MB.
    public static let maxManifestBody = 24 << 20
    /// At most this many records per change-feed page.
    public static let maxChangesPage = 5_000
    /// The longest a change-feed request may ask to be held (`wait`, seconds): long
    /// enough that an idle device asks about once a minute, short enough that proxies
    /// and NAT tables, which drop quiet connections after a few minutes, keep it.
    public static let maxChangesWait = 60
    /// At most this many records per file-listing page.
    public static let maxListPage = 5_000
    /// `POST /v1/blocks`: many blocks in one body (`BlockPack`), stored with one commit.
    public static let blockPack = "/v1/blocks"
    /// `POST /v1/blocks/fetch`: many blocks in one reply, in the order asked.
    public static let blockPackFetch = "/v1/blocks/fetch"
    /// The largest pack a device may send (413 beyond, before a byte is read): 16 MiB,
    /// thousands of small blocks or four whole ones, one durable commit.
    public static let maxPackBody = 16 << 20
    /// At most this many hashes per `POST /v1/blocks/fetch` (413 beyond).
    public static let maxPackHashes = 1_024
    /// The most bytes one `POST /v1/blocks/fetch` may answer, records' headers included
    /// (413 beyond: ask for fewer blocks).
    public static let maxPackReply = 64 << 20
    public static let tusVersion = "1.0.0"
    public static let tusExtensions = "creation,checksum,expiration,termination"
}

/// `POST /v1/blocks` answered: how many of the pack's blocks were stored by it and how
/// many the workspace had already (a block sent twice in one pack counts once stored,
/// then present).
public struct BlockPackResponse: Codable, Sendable, Equatable {
    public var stored: Int
    public var present: Int
    public init(stored: Int, present: Int) { self.stored = stored; self.present = present }
}

/// `POST /v1/blocks/fetch`: the blocks wanted, each a hash of a block the workspace has,
/// at most `API.maxPackHashes`.
public struct BlockPackRequest: Codable, Sendable {
    public var hashes: [String]
    public init(hashes: [String]) { self.hashes = hashes }
}

/// `GET /v1/health`
public struct HealthResponse: Codable, Sendable, Equatable {
    public var status: String
    public var version: String
    public var time: Int64
    public init(status: String, version: String, time: Int64) { self.status = status; self.version = version; self.time = time }
}

/// `POST /v1/contents/present`: which of these content hashes does the workspace have
/// (a verified manifest)? The same shape would serve any list of hashes.
public struct PresentRequest: Codable, Sendable {
    public var hashes: [String]
    public init(hashes: [String]) { self.hashes = hashes }
}

public struct PresentResponse: Codable, Sendable {
    /// The subset of the asked hashes that the workspace has, lowercase.
    public var present: [String]
    public init(present: [String]) { self.present = present }
}

/// `POST /v1/uploads`: the manifest of one content. The server checks that `blocks`
/// hash to `content` and that their count fits `size`, then lists the blocks it lacks.
/// Unknown fields are refused (400 naming the field), as the OpenAPI document says
/// (`additionalProperties: false`): a misspelt field is a bug to report, not to skip.
public struct CreateUploadRequest: Codable, Sendable {
    public var content: String
    public var size: Int64
    public var blocks: [String]
    public init(content: String, size: Int64, blocks: [String]) { self.content = content; self.size = size; self.blocks = blocks }

    private enum CodingKeys: String, CodingKey, CaseIterable { case content, size, blocks }

    public init(from decoder: any Decoder) throws {
        try WireJSON.refuseUnknownFields(decoder, known: CodingKeys.allCases.map(\.rawValue))
        let c = try decoder.container(keyedBy: CodingKeys.self)
        content = try c.decode(String.self, forKey: .content)
        size = try c.decode(Int64.self, forKey: .size)
        blocks = try c.decode([String].self, forKey: .blocks)
    }
}

/// One block the server lacks: a tus upload of `length` bytes at the presigned `url`,
/// `offset` bytes of which the server holds already.
public struct BlockUploadInfo: Codable, Sendable, Equatable {
    /// The block's position in the file (its first occurrence when the file repeats it).
    public var index: Int
    public var hash: String
    public var length: Int64
    public var url: String
    public var offset: Int64
    /// How to send it: `tus` (PATCHes to `url` from `offset`: the embedded store) or `s3`
    /// (one PUT of the whole block to `url` with `headers`, then `POST /v1/blocks/<hash>/verify`).
    public var kind: String
    /// `s3` only: the headers the PUT must carry as they are (they are signed).
    public var headers: [String: String]?
    public init(index: Int, hash: String, length: Int64, url: String, offset: Int64, kind: String = BlockUploadInfo.tus,
                headers: [String: String]? = nil) {
        self.index = index; self.hash = hash; self.length = length; self.url = url; self.offset = offset
        self.kind = kind; self.headers = headers
    }
    public static let tus = "tus"
    public static let s3 = "s3"
}

public struct CreateUploadResponse: Codable, Sendable, Equatable {
    /// "present" (the content is known: send nothing) or "upload" (send `blocks`, then
    /// record the file with its block list; an empty list means every block is there).
    public var status: String
    /// Unix seconds after which the `blocks` URLs are refused; ask again for fresh ones.
    public var expiresAt: Int64?
    public var blocks: [BlockUploadInfo]?
    public init(status: String, expiresAt: Int64? = nil, blocks: [BlockUploadInfo]? = nil) {
        self.status = status; self.expiresAt = expiresAt; self.blocks = blocks
    }
    public static let present = "present"
    public static let upload = "upload"
}

/// `GET /v1/contents/<hash>/blocks`: a content's manifest.
public struct ContentBlocksResponse: Codable, Sendable, Equatable {
    public var content: String
    public var size: Int64
    public var blocks: [String]
    public init(content: String, size: Int64, blocks: [String]) { self.content = content; self.size = size; self.blocks = blocks }
}

/// A workspace path mapped to a content. Sent by a device (`POST /v1/files`), returned
/// by listings and the change feed with `device` and `sequence` filled in by the server.
public struct FileRecord: Codable, Sendable, Equatable, Hashable {
    /// Workspace path, relative, `/`-separated, e.g. `Camera Roll/IMG_0001.jpg`.
    public var path: String
    /// The content hash (SHA-256 of the block digests; not `sha256sum` of the bytes).
    public var hash: String
    public var size: Int64
    /// The block list, sent when the server may not have the content yet (it then
    /// checks it and records the manifest with the file). Never returned by listings:
    /// `GET /v1/contents/<hash>/blocks` has it.
    public var blocks: [String]?
    /// Capture date (EXIF DateTimeOriginal, else mtime), Unix seconds; nil when unknown.
    public var captureDate: Int64?
    /// Modification time, Unix seconds.
    public var mtime: Int64
    /// The device's own change sequence for this commit.
    public var deviceSequence: Int64
    /// Set by the server: the device that recorded it.
    public var device: String?
    /// Set by the server: the position of this record in the change feed.
    public var sequence: Int64?
    /// Set by the server: when this version was (last) recorded, Unix seconds; nil for
    /// records from before per-device versions (migration `server-003-versions`).
    public var recordedAt: Int64?

    public init(path: String, hash: String, size: Int64, blocks: [String]? = nil, captureDate: Int64?, mtime: Int64,
                deviceSequence: Int64, device: String? = nil, sequence: Int64? = nil, recordedAt: Int64? = nil) {
        self.path = path; self.hash = hash; self.size = size; self.blocks = blocks; self.captureDate = captureDate
        self.mtime = mtime; self.deviceSequence = deviceSequence; self.device = device; self.sequence = sequence
        self.recordedAt = recordedAt
    }
}

/// `GET /v1/files?device=&prefix=&after=&limit=`: the current version of each
/// (device, path), by device then path.
public struct FileListResponse: Codable, Sendable {
    public var files: [FileRecord]
    /// When more records follow: pass as `after` to get the next page. Null on the last
    /// page. With `device` it is a path; without, `DEVICE/PATH` (names have no `/`).
    public var next: String?
    public init(files: [FileRecord], next: String?) { self.files = files; self.next = next }
}

/// `GET /v1/files/versions?device=&path=`: every version of one (device, path),
/// oldest first; the last is the current one. Each is downloadable by its `hash`.
public struct FileVersionsResponse: Codable, Sendable {
    public var device: String
    public var path: String
    public var versions: [FileRecord]
    public init(device: String, path: String, versions: [FileRecord]) { self.device = device; self.path = path; self.versions = versions }
}

/// `GET /v1/changes?since=&limit=`
public struct ChangesResponse: Codable, Sendable {
    public var changes: [FileRecord]
    /// The administrator's deletions in the same sequence range (absent from servers
    /// before `server-005-deletions`).
    public var deletions: [VersionDeletion]?
    /// Pass as `since` next time; equals `since` when there was nothing new.
    public var nextSequence: Int64
    /// The highest sequence the server has handed out (absent from older servers). A
    /// `since` above it means the server forgot part of its feed (reset, or restored
    /// from an older copy): read the feed again from 0.
    public var latestSequence: Int64?
    /// The workspace's identity, 32 hex digits, the same from every server process of it
    /// (absent from older servers). Another value than last time: the address now
    /// reaches another workspace (or the server was reset): read the feed again from 0.
    public var workspace: String?
    public init(changes: [FileRecord], deletions: [VersionDeletion]? = nil, nextSequence: Int64, latestSequence: Int64? = nil,
                workspace: String? = nil) {
        self.changes = changes; self.deletions = deletions; self.nextSequence = nextSequence; self.latestSequence = latestSequence
        self.workspace = workspace
    }
}

/// One version deleted by the administrator (`vdrive serve backup delete`), as an entry
/// of the change feed: `version` is the deleted version's `sequence`.
public struct VersionDeletion: Codable, Sendable, Equatable {
    public var sequence: Int64
    public var device: String
    public var path: String
    public var hash: String
    public var version: Int64
    public init(sequence: Int64, device: String, path: String, hash: String, version: Int64) {
        self.sequence = sequence; self.device = device; self.path = path; self.hash = hash; self.version = version
    }
}

/// A device's backup cursor: every commit with a device sequence up to `sequence`
/// is backed up; `newestCaptureDate` is the newest capture date among them.
public struct Watermark: Codable, Sendable, Equatable {
    public var sequence: Int64
    public var newestCaptureDate: Int64?
    public init(sequence: Int64, newestCaptureDate: Int64?) { self.sequence = sequence; self.newestCaptureDate = newestCaptureDate }
}

/// `GET /v1/watermark`: `watermark` is null until the device first sets one.
public struct WatermarkResponse: Codable, Sendable {
    public var device: String
    public var watermark: Watermark?
    public init(device: String, watermark: Watermark?) { self.device = device; self.watermark = watermark }
}

/// Every error body: a stable code, a sentence for people, and the field at fault.
public struct ErrorResponse: Codable, Sendable, Equatable {
    public var error: String
    public var message: String
    public var field: String?
    /// `missing_blocks` only: the block hashes the server lacks.
    public var missing: [String]?
    /// `quota_exceeded` only: the workspace's bytes in use and its quota.
    public var used: Int64?
    public var quota: Int64?
    public init(error: String, message: String, field: String? = nil, missing: [String]? = nil, used: Int64? = nil, quota: Int64? = nil) {
        self.error = error; self.message = message; self.field = field; self.missing = missing
        self.used = used; self.quota = quota
    }
}

/// JSON coding with the same settings on both sides.
public enum WireJSON {
    public static func encode<T: Encodable>(_ value: T) -> [UInt8] {
        if let value = value as? any JSONWritable {
            var json = JSONWriter()
            value.write(to: &json)
            return json.bytes
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // Encoding our own plain structs cannot fail.
        return Array(try! encoder.encode(value))
    }

    /// `{"<key>":["<hex>",…]}` written directly: the dedup call carries up to 10,000
    /// hashes each way, and JSONEncoder costs about 1 µs a string here. The strings must
    /// need no escaping (hex digits do not).
    public static func hashList(_ key: String, _ hexes: [String]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(key.utf8.count + 8 + hexes.count * 67)
        out += Array("{\"\(key)\":[".utf8)
        for (i, hex) in hexes.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "\""))
            out += hex.utf8
            out.append(UInt8(ascii: "\""))
        }
        out += Array("]}".utf8)
        return out
    }

    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    static let unknownFieldPrefix = "unknown field"

    /// Throws when the object being decoded has a field not in `known`.
    public static func refuseUnknownFields(_ decoder: any Decoder, known: [String]) throws {
        let container = try decoder.container(keyedBy: AnyKey.self)
        for key in container.allKeys where !known.contains(key.stringValue) {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath + [key],
                                                    debugDescription: "\(unknownFieldPrefix) '\(key.stringValue)'; the fields are \(known.joined(separator: ", "))"))
        }
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        if let readable = type as? any JSONReadable.Type {
            // `readable` is `T` itself, so the cast holds; no trap if it ever did not.
            guard let value = try JSONReader.read(bytes, { try readable.init(json: &$0) }) as? T else {
                throw JSONReader.Failure("\(T.self) could not be read")
            }
            return value
        }
        return try JSONDecoder().decode(type, from: Data(bytes))
    }

    /// The field a decoding error is about, as a dotted path (`hashes.3`, `size`), for 400
    /// replies. With the `body` that failed, a number no field can hold is named too
    /// (`unfitNumber`: the decoder itself names no field for it).
    public static func describe(_ error: Error, body: [UInt8]? = nil) -> (field: String?, message: String) {
        if let failure = error as? JSONReader.Failure {
            return (failure.field, failure.syntax ? "the body is not valid JSON: \(failure.message)" : failure.message)
        }
        guard let error = error as? DecodingError else { return (nil, "\(error)") }
        if case .dataCorrupted(let ctx) = error, ctx.codingPath.isEmpty, let body, let (key, text) = unfitNumber(in: body) {
            let shown = text.count <= 40 ? text : text.prefix(37) + "..."
            return (key, "\(key.map { "field '\($0)'" } ?? "a number") must be a whole number from \(Int64.min) to \(Int64.max) (each field's bounds are in GET /v1/openapi.json), got \(shown)")
        }
        func path(_ keys: [CodingKey], _ last: CodingKey? = nil) -> String? {
            let all = keys + (last.map { [$0] } ?? [])
            if all.isEmpty { return nil }
            return all.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .keyNotFound(let key, let ctx):
            return (path(ctx.codingPath, key), "missing field '\(path(ctx.codingPath, key) ?? key.stringValue)'")
        case .typeMismatch(let type, let ctx):
            return (path(ctx.codingPath), "field '\(path(ctx.codingPath) ?? "(body)")' must be \(typeName(type))")
        case .valueNotFound(let type, let ctx):
            return (path(ctx.codingPath), "field '\(path(ctx.codingPath) ?? "(body)")' must be \(typeName(type)), not null")
        case .dataCorrupted(let ctx) where ctx.debugDescription.hasPrefix(unknownFieldPrefix):
            return (path(ctx.codingPath), ctx.debugDescription)
        case .dataCorrupted(let ctx) where !ctx.codingPath.isEmpty:
            // A value the type refused (a kind or an op it does not know), not bad JSON.
            return (path(ctx.codingPath), "field '\(path(ctx.codingPath) ?? "")': \(ctx.debugDescription)")
        case .dataCorrupted(let ctx):
            return (path(ctx.codingPath), "the body is not valid JSON: \(ctx.debugDescription)")
        @unknown default:
            return (nil, "\(error)")
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int64.Type, is Int.Type: return "an integer"
        case is Array<String>.Type: return "an array of strings"
        default: return "\(type)"
        }
    }
}
