/// The OpenAPI 3 document served at `GET /v1/openapi.json`. It lists exactly the
/// routes in Router.swift; ServerTests checks every path here against the server.
enum OpenAPI {
    static let document = #"""
{
  "openapi": "3.0.3",
  "info": {"title": "VirtualDrive workspace server", "version": "0.1.0",
           "description": "Devices authenticate with 'Authorization: Bearer <device token>'. A file's content is cut into 4 MiB blocks at aligned offsets, each named by its SHA-256; the content hash is the SHA-256 of the concatenated 32-byte block digests. Blocks are uploaded with tus 1.0 (core, creation, checksum sha256, expiration, termination), one upload per block, on presigned URLs that need no token. See Docs/protocol.md."},
  "components": {
    "securitySchemes": {"device": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "additionalProperties": false, "required": ["error", "message"], "properties": {"error": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}, "missing": {"type": "array", "description": "missing_blocks only: the block hashes the server lacks", "items": {"$ref": "#/components/schemas/Hash"}}}},
      "Health": {"type": "object", "required": ["status", "version", "time"], "properties": {"status": {"type": "string"}, "version": {"type": "string"}, "time": {"type": "integer", "format": "int64"}}},
      "Hash": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
      "PresentRequest": {"type": "object", "required": ["hashes"], "properties": {"hashes": {"type": "array", "maxItems": 10000, "items": {"$ref": "#/components/schemas/Hash"}}}},
      "PresentResponse": {"type": "object", "required": ["present"], "properties": {"present": {"type": "array", "items": {"$ref": "#/components/schemas/Hash"}}}},
      "BlockList": {"type": "array", "maxItems": 262144, "description": "the file's block digests in order, zero blocks (holes) included; as many as ceil(size / 4194304)", "items": {"$ref": "#/components/schemas/Hash"}},
      "CreateUploadRequest": {"type": "object", "additionalProperties": false, "required": ["content", "size", "blocks"], "properties": {"content": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0}, "blocks": {"$ref": "#/components/schemas/BlockList"}}},
      "BlockUpload": {"type": "object", "additionalProperties": false, "required": ["index", "hash", "length", "url", "offset"], "properties": {"index": {"type": "integer", "minimum": 0}, "hash": {"$ref": "#/components/schemas/Hash"}, "length": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4194304}, "url": {"type": "string", "description": "absolute presigned tus URL"}, "offset": {"type": "integer", "format": "int64", "minimum": 0}}},
      "CreateUploadResponse": {"type": "object", "additionalProperties": false, "required": ["status"], "properties": {"status": {"type": "string", "enum": ["present", "upload"]}, "expiresAt": {"type": "integer", "format": "int64", "description": "upload only: the URLs' expiry (Unix seconds)"}, "blocks": {"type": "array", "description": "upload only: the blocks the server lacks (possibly none)", "items": {"$ref": "#/components/schemas/BlockUpload"}}}},
      "ContentBlocks": {"type": "object", "additionalProperties": false, "required": ["content", "size", "blocks"], "properties": {"content": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0}, "blocks": {"$ref": "#/components/schemas/BlockList"}}},
      "FileRecord": {"type": "object", "required": ["path", "hash", "size", "mtime", "deviceSequence"], "properties": {"path": {"type": "string", "minLength": 1, "maxLength": 4096}, "hash": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0}, "blocks": {"allOf": [{"$ref": "#/components/schemas/BlockList"}], "writeOnly": true, "description": "required when the workspace does not hold the content yet"}, "captureDate": {"type": "integer", "format": "int64", "nullable": true}, "mtime": {"type": "integer", "format": "int64"}, "deviceSequence": {"type": "integer", "format": "int64"}, "device": {"type": "string", "readOnly": true}, "sequence": {"type": "integer", "format": "int64", "readOnly": true}, "recordedAt": {"type": "integer", "format": "int64", "nullable": true, "readOnly": true, "description": "when this version was (last) recorded; null for records from before server-003-versions"}}},
      "FileList": {"type": "object", "required": ["files"], "properties": {"files": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "next": {"type": "string", "nullable": true, "description": "pass as 'after' for the next page; null on the last"}}},
\#(OpenAPI.versionSchemas)
      "Changes": {"type": "object", "required": ["changes", "nextSequence"], "properties": {"changes": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "nextSequence": {"type": "integer", "format": "int64"}}},
      "Watermark": {"type": "object", "required": ["sequence"], "properties": {"sequence": {"type": "integer", "format": "int64"}, "newestCaptureDate": {"type": "integer", "format": "int64", "nullable": true}}},
      "WatermarkResponse": {"type": "object", "required": ["device"], "properties": {"device": {"type": "string"}, "watermark": {"allOf": [{"$ref": "#/components/schemas/Watermark"}], "nullable": true}}}
    },
    "responses": {
      "BadRequest": {"description": "bad JSON, wrong types or invalid values; 'field' names the field", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthorized": {"description": "missing, unknown or revoked device token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "presigned URL tampered with or expired; nothing written", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "unknown upload, content or block", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Conflict": {"description": "offset_conflict (Upload-Offset header has the server's), size_conflict, upload_busy, missing_blocks ('missing' lists them) or content_missing", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "TooLarge": {"description": "body longer than declared / allowed, or a block upload over 4 MiB (Tus-Max-Size); not read into memory", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "ChecksumMismatch": {"description": "460: Upload-Checksum of the chunk (checksum_mismatch: the chunk is discarded), or the whole block's SHA-256 (block_checksum_mismatch: the upload restarts at 0), does not match", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "DiskFull": {"description": "507: the server's disk is full; resume once space is freed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    },
    "parameters": {
      "hash": {"name": "hash", "in": "query", "required": true, "schema": {"$ref": "#/components/schemas/Hash"}},
      "size": {"name": "size", "in": "query", "required": true, "schema": {"type": "integer", "format": "int64"}},
      "expires": {"name": "expires", "in": "query", "required": true, "schema": {"type": "integer", "format": "int64"}},
      "sig": {"name": "sig", "in": "query", "required": true, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
      "id": {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
      "pathHash": {"name": "hash", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/Hash"}},
      "Range": {"name": "Range", "in": "header", "schema": {"type": "string", "pattern": "^bytes=", "description": "one range (bytes=a-b, a-, -n); several ranges are answered with the whole body"}},
      "If-None-Match": {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}},
      "If-Range": {"name": "If-Range", "in": "header", "schema": {"type": "string"}}
    }
  },
  "security": [{"device": []}],
  "paths": {
    "/v1/health": {"get": {"security": [], "summary": "liveness", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}}}}},
    "/v1/openapi.json": {"get": {"security": [], "summary": "this document", "responses": {"200": {"description": "OpenAPI 3 document"}}}},
    "/v1/contents/present": {"post": {"summary": "whole-file dedup: which of up to 10,000 content hashes the workspace holds (a verified manifest)",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentRequest"}}}},
      "responses": {"200": {"description": "the present subset", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "413": {"$ref": "#/components/responses/TooLarge"}}}},
    "/v1/contents/{hash}/blocks": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "a content's manifest: size and block list", "responses": {"200": {"description": "the manifest", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ContentBlocks"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
    "/v1/contents/{hash}": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "a whole file's bytes, assembled from its blocks (zero blocks as zeros); Range (one range) gives 206; ETag is the quoted content hash; If-None-Match gives 304",
        "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "the content", "content": {"application/octet-stream": {}}}, "206": {"description": "the range"}, "304": {"description": "not modified"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "416": {"description": "range not satisfiable; Content-Range: bytes */size"}}},
      "head": {"summary": "headers of GET", "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "ok"}, "206": {"description": "the range"}, "304": {"description": "not modified"}, "400": {"description": "bad hash"}, "401": {"description": "missing, unknown or revoked device token"}, "404": {"description": "unknown content"}, "416": {"description": "range not satisfiable"}}}},
    "/v1/blocks/{hash}": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "one stored block (zero blocks are never stored); Range (one range) gives 206; ETag is the quoted hash; If-None-Match gives 304",
        "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "the block", "content": {"application/octet-stream": {}}}, "206": {"description": "the range"}, "304": {"description": "not modified"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "416": {"description": "range not satisfiable; Content-Range: bytes */size"}}},
      "head": {"summary": "headers of GET", "parameters": [{"$ref": "#/components/parameters/Range"}, {"$ref": "#/components/parameters/If-None-Match"}, {"$ref": "#/components/parameters/If-Range"}],
        "responses": {"200": {"description": "ok"}, "206": {"description": "the range"}, "304": {"description": "not modified"}, "400": {"description": "bad hash"}, "401": {"description": "missing, unknown or revoked device token"}, "404": {"description": "unknown block"}, "416": {"description": "range not satisfiable"}}},
      "put": {"summary": "upload one whole block in one request (not resumable); Content-Length required, 1 to 4194304 bytes",
        "parameters": [{"name": "Content-Length", "in": "header", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": 4194304}}],
        "requestBody": {"required": true, "content": {"application/octet-stream": {}}},
        "responses": {"200": {"description": "already present (body not read)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "411": {"description": "Content-Length missing"}, "413": {"$ref": "#/components/responses/TooLarge"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/uploads": {"post": {"summary": "the upload plan of a content: present, or one tus upload per block the workspace lacks; idempotent per block. 400 content_mismatch when the blocks do not hash to the content hash",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadRequest"}}}},
      "responses": {"200": {"description": "present, or the plan with existing uploads and their current offsets", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "the plan; at least one upload is new", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/tus": {
      "options": {"security": [], "summary": "tus capabilities", "responses": {"204": {"description": "Tus-Version, Tus-Extension, Tus-Checksum-Algorithm, Tus-Max-Size (4194304: one block)"}}},
      "post": {"summary": "tus creation of one block (for off-the-shelf tus clients); Upload-Metadata must carry sha256 of the block",
        "parameters": [{"name": "Upload-Length", "in": "header", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": 4194304}}, {"name": "Upload-Metadata", "in": "header", "required": true, "schema": {"type": "string"}}, {"name": "Tus-Resumable", "in": "header", "schema": {"type": "string", "enum": ["1.0.0"]}}],
        "responses": {"201": {"description": "Location: the presigned upload URL"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "412": {"description": "unsupported Tus-Resumable"}, "413": {"$ref": "#/components/responses/TooLarge"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/tus/{id}": {
      "parameters": [{"$ref": "#/components/parameters/id"}, {"$ref": "#/components/parameters/hash"}, {"$ref": "#/components/parameters/size"}, {"$ref": "#/components/parameters/expires"}, {"$ref": "#/components/parameters/sig"}],
      "options": {"security": [], "summary": "tus capabilities", "responses": {"204": {"description": "capabilities"}}},
      "head": {"security": [], "summary": "tus offset", "responses": {"200": {"description": "Upload-Offset, Upload-Length, Upload-Expires"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "507": {"$ref": "#/components/responses/DiskFull"}}},
      "patch": {"security": [], "summary": "append bytes at Upload-Offset; optional Upload-Checksum: sha256 <base64>",
        "parameters": [{"name": "Upload-Offset", "in": "header", "required": true, "schema": {"type": "integer"}}, {"name": "Upload-Checksum", "in": "header", "schema": {"type": "string"}}],
        "requestBody": {"required": true, "content": {"application/offset+octet-stream": {}}},
        "responses": {"204": {"description": "accepted; Upload-Offset is the new offset"}, "400": {"$ref": "#/components/responses/BadRequest"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "415": {"description": "wrong Content-Type"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}},
      "delete": {"security": [], "summary": "tus termination", "responses": {"204": {"description": "terminated"}, "403": {"$ref": "#/components/responses/Forbidden"}, "404": {"$ref": "#/components/responses/NotFound"}, "409": {"$ref": "#/components/responses/Conflict"}}}},
    "/v1/files": {
      "post": {"summary": "record path -> content (idempotent); a content not yet held needs 'blocks': the manifest is checked and recorded with the file in one transaction once every non-zero block is stored (409 missing_blocks lists the others)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}},
        "responses": {"200": {"description": "unchanged", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "201": {"description": "recorded with a new sequence", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "507": {"$ref": "#/components/responses/DiskFull"}}},
      "get": {"summary": "the current version of each (device, path) under a prefix, by device then path, a page at a time; 'next' is a path with 'device', else DEVICE/PATH", "parameters": [{"name": "device", "in": "query", "schema": {"type": "string"}, "description": "one device's backups only"}, {"name": "prefix", "in": "query", "schema": {"type": "string"}}, {"name": "after", "in": "query", "schema": {"type": "string"}}, {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 5000}}],
        "responses": {"200": {"description": "files by path", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileList"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
\#(OpenAPI.versionPaths)
    "/v1/changes": {"get": {"summary": "change feed after a server sequence",
      "parameters": [{"name": "since", "in": "query", "schema": {"type": "integer", "format": "int64", "minimum": 0}}, {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 5000}}],
      "responses": {"200": {"description": "changes in sequence order", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Changes"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
    "/v1/watermark": {
      "get": {"summary": "this device's backup cursor", "responses": {"200": {"description": "watermark (null before the first PUT)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WatermarkResponse"}}}}, "401": {"$ref": "#/components/responses/Unauthorized"}}},
      "put": {"summary": "store this device's backup cursor", "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Watermark"}}}},
        "responses": {"200": {"description": "stored", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/WatermarkResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}}
  }
}
"""#
}
