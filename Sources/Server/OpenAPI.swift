/// The OpenAPI 3 document served at `GET /v1/openapi.json`: every operation the router
/// answers (`Methods`), every status code each can answer, and every constraint the
/// server enforces, so a client generated from it, or a fuzzer driven by it, meets no
/// surprise. ContractTests runs schemathesis against a real server with it; patterns
/// the server also checks come from `WirePatterns`, one string for both.
///
/// Status codes: 400 is a value that breaks this document (type, pattern, bounds,
/// unknown field); 422 values that each fit it but contradict one another (blocks that
/// do not hash to the content hash), which no JSON Schema can state. 500 is never
/// declared: it is a bug, and the contract test fails on it.
enum OpenAPI {
    static let document = #"""
{
  "openapi": "3.0.3",
  "info": {"title": "VirtualDrive workspace server", "version": "0.1.0",
           "description": "Devices authenticate with 'Authorization: Bearer <device token>'. A file's content is cut into 4 MiB blocks at aligned offsets, each named by its SHA-256; the content hash is the SHA-256 of the concatenated 32-byte block digests. Blocks are uploaded with tus 1.0 (core, creation, checksum sha256, expiration, termination), one upload per block, on presigned URLs that need no token (their 'sig' is the credential). 400: a value breaks this document; 422: values fit it but contradict one another. See Docs/protocol.md."},
  "components": {
    "securitySchemes": {
      "device": {"type": "http", "scheme": "bearer", "description": "a device token from 'vdrive serve device add NAME'"},
      "presigned": {"type": "apiKey", "in": "query", "name": "sig", "description": "64 hex digits: HMAC-SHA256 under the server's key over 'vdrive-presign-v1\\nPATCH\\n<path>\\n<hash>\\n<size>\\n<expires>'; handed out by POST /v1/uploads and POST /v1/tus in absolute URLs; it authorises OPTIONS, HEAD, PATCH and DELETE on its upload until 'expires'"}
    },
    "headers": {
      "WWW-Authenticate": {"schema": {"type": "string", "enum": ["Bearer realm=\"vdrive\""]}},
      "Tus-Resumable": {"schema": {"type": "string", "enum": ["1.0.0"]}},
      "Upload-Expires": {"description": "the URL's expiry, an HTTP date", "schema": {"type": "string"}},
      "Upload-Offset": {"schema": {"type": "integer", "format": "int64", "minimum": 0}},
      "Upload-Length": {"schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4194304}}
    },
    "schemas": {
      "Error": {"type": "object", "additionalProperties": false, "required": ["error", "message"], "properties": {"error": {"type": "string", "description": "a stable code (Docs/protocol.md, Errors)"}, "message": {"type": "string", "description": "what was wrong and what to do"}, "field": {"type": "string", "description": "the JSON field, query argument or header at fault"}, "missing": {"type": "array", "description": "missing_blocks only: the block hashes the server lacks", "items": {"$ref": "#/components/schemas/Hash"}}}},
      "Health": {"type": "object", "additionalProperties": false, "required": ["status", "version", "time"], "properties": {"status": {"type": "string", "enum": ["ok"]}, "version": {"type": "string"}, "time": {"type": "integer", "format": "int64"}}},
      "Hash": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$", "description": "SHA-256 as 64 hex digits (either case accepted, lowercase returned)"},
      "LowerHash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
      "Path": {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": \#(WirePatterns.json(WirePatterns.path)), "description": "a workspace path: relative, '/'-separated, no empty, '.' or '..' components, no NUL, at most 4096 characters"},
      "PresentRequest": {"type": "object", "additionalProperties": false, "required": ["hashes"], "properties": {"hashes": {"type": "array", "maxItems": 10000, "items": {"$ref": "#/components/schemas/Hash"}}}},
      "PresentResponse": {"type": "object", "additionalProperties": false, "required": ["present"], "properties": {"present": {"type": "array", "items": {"$ref": "#/components/schemas/LowerHash"}}}},
      "BlockList": {"type": "array", "maxItems": 262144, "description": "the file's block digests in order, zero blocks (holes) included; as many as ceil(size / 4194304) (else 422), and they must hash to the content hash (else 422 content_mismatch)", "items": {"$ref": "#/components/schemas/Hash"}},
      "CreateUploadRequest": {"type": "object", "additionalProperties": false, "required": ["content", "size", "blocks"], "properties": {"content": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 1099511627776}, "blocks": {"$ref": "#/components/schemas/BlockList"}}},
      "BlockUpload": {"type": "object", "additionalProperties": false, "required": ["index", "hash", "length", "url", "offset"], "properties": {"index": {"type": "integer", "minimum": 0}, "hash": {"$ref": "#/components/schemas/LowerHash"}, "length": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4194304}, "url": {"type": "string", "description": "absolute presigned tus URL"}, "offset": {"type": "integer", "format": "int64", "minimum": 0}}},
      "CreateUploadResponse": {"type": "object", "additionalProperties": false, "required": ["status"], "properties": {"status": {"type": "string", "enum": ["present", "upload"]}, "expiresAt": {"type": "integer", "format": "int64", "description": "upload only: the URLs' expiry (Unix seconds)"}, "blocks": {"type": "array", "description": "upload only: the blocks the server lacks (possibly none)", "items": {"$ref": "#/components/schemas/BlockUpload"}}}},
      "ContentBlocks": {"type": "object", "additionalProperties": false, "required": ["content", "size", "blocks"], "properties": {"content": {"$ref": "#/components/schemas/LowerHash"}, "size": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 1099511627776}, "blocks": {"$ref": "#/components/schemas/BlockList"}}},
      "FileRecord": {"type": "object", "additionalProperties": false, "required": ["path", "hash", "size", "mtime", "deviceSequence"], "properties": {"path": {"$ref": "#/components/schemas/Path"}, "hash": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0, "maximum": 1099511627776}, "blocks": {"allOf": [{"$ref": "#/components/schemas/BlockList"}], "writeOnly": true, "description": "required when the workspace does not hold the content yet (409 content_missing without it)"}, "captureDate": {"type": "integer", "format": "int64", "nullable": true}, "mtime": {"type": "integer", "format": "int64"}, "deviceSequence": {"type": "integer", "format": "int64"}, "device": {"type": "string", "readOnly": true}, "sequence": {"type": "integer", "format": "int64", "readOnly": true}, "recordedAt": {"type": "integer", "format": "int64", "nullable": true, "readOnly": true, "description": "when this version was (last) recorded; null for records from before server-003-versions"}}},
      "FileList": {"type": "object", "additionalProperties": false, "required": ["files"], "properties": {"files": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "next": {"type": "string", "nullable": true, "description": "pass as 'after' for the next page; null or absent on the last; a path with 'device', else DEVICE/PATH"}}},
\#(OpenAPI.versionSchemas)
\#(OpenAPI.chunkSchemas)
      "Changes": {"type": "object", "additionalProperties": false, "required": ["changes", "nextSequence"], "properties": {"changes": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "deletions": {"type": "array", "description": "versions the administrator deleted, in the same sequence range", "items": {"$ref": "#/components/schemas/VersionDeletion"}}, "nextSequence": {"type": "integer", "format": "int64", "minimum": 0}}},
      "VersionDeletion": {"type": "object", "additionalProperties": false, "required": ["sequence", "device", "path", "hash", "version"], "properties": {"sequence": {"type": "integer", "format": "int64"}, "device": {"$ref": "#/components/schemas/DeviceName"}, "path": {"$ref": "#/components/schemas/Path"}, "hash": {"$ref": "#/components/schemas/Hash"}, "version": {"type": "integer", "format": "int64", "description": "the sequence of the deleted version"}}},
      "Watermark": {"type": "object", "additionalProperties": false, "required": ["sequence"], "properties": {"sequence": {"type": "integer", "format": "int64", "minimum": 0}, "newestCaptureDate": {"type": "integer", "format": "int64", "nullable": true}}},
      "WatermarkResponse": {"type": "object", "additionalProperties": false, "required": ["device"], "properties": {"device": {"type": "string"}, "watermark": {"allOf": [{"$ref": "#/components/schemas/Watermark"}], "nullable": true}}}
    },
    "responses": {
      "BadRequest": {"description": "a value breaks this document: bad JSON, wrong type, unknown field, pattern or bounds; 'field' names it", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthorized": {"description": "missing, malformed, unknown or revoked device token", "headers": {"WWW-Authenticate": {"$ref": "#/components/headers/WWW-Authenticate"}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "presigned URL without a well-formed 'sig', altered, or expired; nothing written", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "unknown upload (terminated, expired), content or block", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Conflict": {"description": "offset_conflict (Upload-Offset header has the server's), size_conflict, upload_busy, missing_blocks ('missing' lists them) or content_missing", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "TooLarge": {"description": "body longer than declared or allowed (JSON: 1 MiB, 24 MiB with a block list), or a block over 4 MiB (Tus-Max-Size); not read into memory", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Inconsistent": {"description": "422: the values fit this document but contradict one another: blocks that do not hash to the content hash (content_mismatch), a block count that does not fit the size, a block listed at two lengths", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "PreconditionFailed": {"description": "Tus-Resumable other than 1.0.0", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "ChecksumMismatch": {"description": "460: Upload-Checksum of the chunk (checksum_mismatch: the chunk is discarded), or the whole block's SHA-256 (block_checksum_mismatch: nothing stored; a tus upload restarts at 0), does not match", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "DiskFull": {"description": "507: the server's disk is full; resume once space is freed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NoBody": {"description": "HEAD: the status and headers GET would answer, no body"}
    },
    "parameters": {
      "uploadID": {"name": "id", "in": "path", "required": true, "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"}},
      "hash": {"name": "hash", "in": "query", "required": true, "description": "the block hash (signed)", "schema": {"$ref": "#/components/schemas/Hash"}},
      "size": {"name": "size", "in": "query", "required": true, "description": "the block's length (signed)", "schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4194304}},
      "expires": {"name": "expires", "in": "query", "required": true, "description": "Unix seconds after which the URL is refused (signed)", "schema": {"type": "integer", "format": "int64", "minimum": 0}},
      "pathHash": {"name": "hash", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/Hash"}},
      "Range": {"name": "Range", "in": "header", "description": "one range (bytes=a-b, a-, -n) gives 206; anything else (several ranges, another unit, garbage) is ignored and the whole body sent (RFC 9110)", "schema": {"type": "string"}},
      "If-None-Match": {"name": "If-None-Match", "in": "header", "description": "the quoted hash or '*' gives 304", "schema": {"type": "string"}},
      "If-Range": {"name": "If-Range", "in": "header", "description": "Range is honoured only when this is the quoted hash", "schema": {"type": "string"}},
      "Tus-Resumable": {"name": "Tus-Resumable", "in": "header", "description": "another version is 412", "schema": {"type": "string", "enum": ["1.0.0"]}}
    }
  },
  "security": [{"device": []}],
  "paths": {
    "/v1/health": {
      "get": {"security": [], "summary": "liveness", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}}}},
      "head": {"security": [], "summary": "liveness, headers only", "responses": {"200": {"$ref": "#/components/responses/NoBody"}}}},
    "/v1/openapi.json": {"get": {"security": [], "summary": "this document", "responses": {"200": {"description": "OpenAPI 3 document", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
    "/v1/contents/present": {"post": {"summary": "whole-file dedup: which of up to 10,000 content hashes the workspace holds (a verified manifest)",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentRequest"}}}},
      "responses": {"200": {"description": "the present subset", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "413": {"$ref": "#/components/responses/TooLarge"}}}},
    "/v1/contents/{hash}/blocks": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "a content's manifest: size and block list", "responses": {"200": {"description": "the manifest", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ContentBlocks"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/contents/{hash}": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "a whole file's bytes, assembled from its blocks (zero blocks as zeros); ETag is the quoted content hash",
        "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "the content", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "206": {"description": "the range; Content-Range says which", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "304": {"description": "not modified"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "416": {"description": "range not satisfiable; Content-Range: bytes */size", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}},
      "head": {"summary": "headers of GET", "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"$ref": "#/components/responses/NoBody"}, "206": {"$ref": "#/components/responses/NoBody"}, "304": {"$ref": "#/components/responses/NoBody"}, "400": {"$ref": "#/components/responses/NoBody"}, "401": {"$ref": "#/components/responses/NoBody"}, "404": {"$ref": "#/components/responses/NoBody"}, "416": {"$ref": "#/components/responses/NoBody"}}}},
    "/v1/blocks/{hash}": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "one stored block (zero blocks are never stored: 404); ETag is the quoted hash",
        "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "the block", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "206": {"description": "the range; Content-Range says which", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "304": {"description": "not modified"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "416": {"description": "range not satisfiable; Content-Range: bytes */size", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}},
      "head": {"summary": "headers of GET", "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"$ref": "#/components/responses/NoBody"}, "206": {"$ref": "#/components/responses/NoBody"}, "304": {"$ref": "#/components/responses/NoBody"}, "400": {"$ref": "#/components/responses/NoBody"}, "401": {"$ref": "#/components/responses/NoBody"}, "404": {"$ref": "#/components/responses/NoBody"}, "416": {"$ref": "#/components/responses/NoBody"}}},
      "put": {"summary": "upload one whole block in one request (not resumable), 1 to 4194304 bytes; Content-Length required (411 without); bytes that do not hash to {hash} are 460 and nothing is stored",
        "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary", "minLength": 1, "maxLength": 4194304}}}},
        "responses": {"200": {"description": "already present (body not read)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "411": {"description": "Content-Length missing", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "413": {"$ref": "#/components/responses/TooLarge"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/uploads": {"post": {"summary": "the upload plan of a content: present, or one tus upload per block the workspace lacks; idempotent per block",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadRequest"}}}},
      "responses": {"200": {"description": "present, or the plan with existing uploads and their current offsets", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "the plan; at least one upload is new", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Inconsistent"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/tus": {
      "options": {"security": [], "summary": "tus capabilities", "responses": {"204": {"description": "Tus-Version, Tus-Extension, Tus-Checksum-Algorithm, Tus-Max-Size (4194304: one block)", "headers": {"Tus-Resumable": {"$ref": "#/components/headers/Tus-Resumable"}}}}},
      "post": {"summary": "tus creation of one block (for off-the-shelf tus clients)",
        "parameters": [{"name": "Upload-Length", "in": "header", "required": true, "description": "the block's length in decimal, 1 to 4194304; a larger one is 413 with Tus-Max-Size (tus)", "schema": {"type": "string", "pattern": \#(WirePatterns.json(WirePatterns.uploadLength))}},
                       {"name": "Upload-Metadata", "in": "header", "required": true, "description": "'key base64' pairs joined by ',', one of them 'sha256 <base64 of the block hash: its 64 hex digits, or its 32 bytes>' (the first such pair counts); 64 bytes that are not hex digits are 422", "schema": {"type": "string", "pattern": \#(WirePatterns.json(WirePatterns.uploadMetadata))}},
                       {"$ref": "#/components/parameters/Tus-Resumable"}],
        "responses": {"201": {"description": "Location: the presigned upload URL (completed already when the block is present)", "headers": {"Location": {"schema": {"type": "string"}}, "Upload-Offset": {"$ref": "#/components/headers/Upload-Offset"}, "Upload-Expires": {"$ref": "#/components/headers/Upload-Expires"}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "412": {"$ref": "#/components/responses/PreconditionFailed"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Inconsistent"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/tus/{id}": {
      "parameters": [{"$ref": "#/components/parameters/uploadID"}, {"$ref": "#/components/parameters/hash"}, {"$ref": "#/components/parameters/size"}, {"$ref": "#/components/parameters/expires"}],
      "options": {"security": [{"presigned": []}], "summary": "tus capabilities of this upload", "responses": {"204": {"description": "Tus-Version, Tus-Extension, Tus-Checksum-Algorithm, Tus-Max-Size, Upload-Expires"}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}}},
      "head": {"security": [{"presigned": []}], "summary": "tus offset", "parameters": [{"$ref": "#/components/parameters/Tus-Resumable"}],
        "responses": {"200": {"description": "Upload-Offset, Upload-Length, Upload-Expires", "headers": {"Upload-Offset": {"$ref": "#/components/headers/Upload-Offset"}, "Upload-Length": {"$ref": "#/components/headers/Upload-Length"}}}, "400": {"$ref": "#/components/responses/NoBody"}, "403": {"$ref": "#/components/responses/NoBody"}, "404": {"$ref": "#/components/responses/NoBody"}, "409": {"$ref": "#/components/responses/NoBody"}, "412": {"$ref": "#/components/responses/NoBody"}, "460": {"$ref": "#/components/responses/NoBody"}, "507": {"$ref": "#/components/responses/NoBody"}}},
      "patch": {"security": [{"presigned": []}], "summary": "append bytes at Upload-Offset; the PATCH that lands the last byte stores the block (460 block_checksum_mismatch if it does not hash to its hash)",
        "parameters": [{"name": "Upload-Offset", "in": "header", "required": true, "schema": {"type": "integer", "format": "int64", "minimum": 0}}, {"name": "Upload-Checksum", "in": "header", "description": "sha256 of this PATCH's body", "schema": {"type": "string", "pattern": \#(WirePatterns.json(WirePatterns.uploadChecksum))}}, {"$ref": "#/components/parameters/Tus-Resumable"}],
        "requestBody": {"required": true, "content": {"application/offset+octet-stream": {"schema": {"type": "string", "format": "binary", "maxLength": 4194304}}}},
        "responses": {"204": {"description": "accepted; Upload-Offset is the new offset", "headers": {"Upload-Offset": {"$ref": "#/components/headers/Upload-Offset"}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}, "412": {"$ref": "#/components/responses/PreconditionFailed"}, "413": {"$ref": "#/components/responses/TooLarge"}, "415": {"description": "Content-Type is not application/offset+octet-stream", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}},
      "delete": {"security": [{"presigned": []}], "summary": "tus termination", "parameters": [{"$ref": "#/components/parameters/Tus-Resumable"}],
        "responses": {"204": {"description": "terminated"}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}, "412": {"$ref": "#/components/responses/PreconditionFailed"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/files": {
      "post": {"summary": "record path -> content (idempotent); a content not yet held needs 'blocks': the manifest is checked and recorded with the file in one transaction once every non-zero block is stored (409 missing_blocks lists the others)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}},
        "responses": {"200": {"description": "unchanged", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "201": {"description": "recorded with a new sequence", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "422": {"$ref": "#/components/responses/Inconsistent"}, "507": {"$ref": "#/components/responses/DiskFull"}}},
      "get": {"summary": "the current version of each (device, path) under a prefix, by device then path, a page at a time",
        "parameters": [\#(OpenAPI.deviceParameter), {"name": "prefix", "in": "query", "description": "a plain string prefix of the paths: empty (all), or a path, optionally ending in '/'", "schema": {"type": "string", "maxLength": 4097, "pattern": \#(WirePatterns.json(WirePatterns.prefix))}}, {"name": "after", "in": "query", "description": "the 'next' of the previous page: a path with 'device', else DEVICE/PATH (a bare DEVICE starts at that device's first file)", "schema": {"type": "string"}}, {"name": "limit", "in": "query", "description": "page size; more than 5000 is 400, not clamped", "schema": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 5000}}],
        "responses": {"200": {"description": "files by path", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileList"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
\#(OpenAPI.versionPaths)
\#(OpenAPI.chunkPaths)
    "/v1/changes": {"get": {"summary": "change feed after a server sequence",
      "parameters": [{"name": "since", "in": "query", "schema": {"type": "integer", "format": "int64", "minimum": 0, "default": 0}}, {"name": "limit", "in": "query", "description": "page size; more than 5000 is 400, not clamped", "schema": {"type": "integer", "minimum": 1, "maximum": 5000, "default": 5000}}],
      "responses": {"200": {"description": "changes in sequence order", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Changes"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/watermark": {
      "get": {"summary": "this device's backup cursor", "responses": {"200": {"description": "watermark (null before the first PUT)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WatermarkResponse"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}},
      "put": {"summary": "store this device's backup cursor", "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Watermark"}}}},
        "responses": {"200": {"description": "stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WatermarkResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "413": {"$ref": "#/components/responses/TooLarge"}, "507": {"$ref": "#/components/responses/DiskFull"}}}}
  }
}
"""#
}
