/// The OpenAPI 3 document served at `GET /v1/openapi.json`. It lists exactly the
/// routes in Router.swift; ServerTests checks every path here against the server.
enum OpenAPI {
    static let document = #"""
{
  "openapi": "3.0.3",
  "info": {"title": "VirtualDrive workspace server", "version": "0.1.0",
           "description": "Devices authenticate with 'Authorization: Bearer <device token>'. Uploads use tus 1.0 (core, creation, checksum sha256, expiration, termination) on presigned URLs that need no token. See Docs/protocol.md."},
  "components": {
    "securitySchemes": {"device": {"type": "http", "scheme": "bearer"}},
    "schemas": {
      "Error": {"type": "object", "required": ["error", "message"], "properties": {"error": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"}}},
      "Health": {"type": "object", "required": ["status", "version", "time"], "properties": {"status": {"type": "string"}, "version": {"type": "string"}, "time": {"type": "integer", "format": "int64"}}},
      "Hash": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
      "PresentRequest": {"type": "object", "required": ["hashes"], "properties": {"hashes": {"type": "array", "maxItems": 10000, "items": {"$ref": "#/components/schemas/Hash"}}}},
      "PresentResponse": {"type": "object", "required": ["present"], "properties": {"present": {"type": "array", "items": {"$ref": "#/components/schemas/Hash"}}}},
      "CreateUploadRequest": {"type": "object", "required": ["hash", "size"], "properties": {"hash": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64", "minimum": 0}}},
      "CreateUploadResponse": {"type": "object", "required": ["status"], "properties": {"status": {"type": "string", "enum": ["present", "upload"]}, "url": {"type": "string"}, "offset": {"type": "integer", "format": "int64"}, "length": {"type": "integer", "format": "int64"}, "expiresAt": {"type": "integer", "format": "int64"}}},
      "FileRecord": {"type": "object", "required": ["path", "hash", "size", "mtime", "deviceSequence"], "properties": {"path": {"type": "string"}, "hash": {"$ref": "#/components/schemas/Hash"}, "size": {"type": "integer", "format": "int64"}, "captureDate": {"type": "integer", "format": "int64", "nullable": true}, "mtime": {"type": "integer", "format": "int64"}, "deviceSequence": {"type": "integer", "format": "int64"}, "device": {"type": "string", "readOnly": true}, "sequence": {"type": "integer", "format": "int64", "readOnly": true}}},
      "FileList": {"type": "object", "required": ["files"], "properties": {"files": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "next": {"type": "string", "nullable": true, "description": "pass as 'after' for the next page; null on the last"}}},
      "Changes": {"type": "object", "required": ["changes", "nextSequence"], "properties": {"changes": {"type": "array", "items": {"$ref": "#/components/schemas/FileRecord"}}, "nextSequence": {"type": "integer", "format": "int64"}}},
      "Watermark": {"type": "object", "required": ["sequence"], "properties": {"sequence": {"type": "integer", "format": "int64"}, "newestCaptureDate": {"type": "integer", "format": "int64", "nullable": true}}},
      "WatermarkResponse": {"type": "object", "required": ["device"], "properties": {"device": {"type": "string"}, "watermark": {"allOf": [{"$ref": "#/components/schemas/Watermark"}], "nullable": true}}}
    },
    "responses": {
      "BadRequest": {"description": "bad JSON, wrong types or invalid values; 'field' names the field", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthorized": {"description": "missing, unknown or revoked device token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "presigned URL tampered with or expired; nothing written", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "unknown upload or blob", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Conflict": {"description": "offset mismatch (Upload-Offset header has the server's), size conflict, upload busy, or blob missing", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "TooLarge": {"description": "body longer than declared / allowed; not read into memory", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "ChecksumMismatch": {"description": "460: Upload-Checksum of the chunk, or the whole blob's SHA-256, does not match; the chunk is discarded", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "DiskFull": {"description": "507: the server's disk is full; resume once space is freed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    },
    "parameters": {
      "hash": {"name": "hash", "in": "query", "required": true, "schema": {"$ref": "#/components/schemas/Hash"}},
      "size": {"name": "size", "in": "query", "required": true, "schema": {"type": "integer", "format": "int64"}},
      "expires": {"name": "expires", "in": "query", "required": true, "schema": {"type": "integer", "format": "int64"}},
      "sig": {"name": "sig", "in": "query", "required": true, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
      "id": {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
      "blobHash": {"name": "hash", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/Hash"}}
    }
  },
  "security": [{"device": []}],
  "paths": {
    "/v1/health": {"get": {"security": [], "summary": "liveness", "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}}}}},
    "/v1/openapi.json": {"get": {"security": [], "summary": "this document", "responses": {"200": {"description": "OpenAPI 3 document"}}}},
    "/v1/blobs/present": {"post": {"summary": "dedup check: which of up to 10,000 hashes the workspace has",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentRequest"}}}},
      "responses": {"200": {"description": "the present subset", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PresentResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "413": {"$ref": "#/components/responses/TooLarge"}}}},
    "/v1/blobs/{hash}": {
      "parameters": [{"$ref": "#/components/parameters/blobHash"}],
      "get": {"summary": "download a blob; Range (one range) gives 206; ETag is the quoted hash; If-None-Match gives 304",
        "parameters": [{"name": "Range", "in": "header", "schema": {"type": "string"}}, {"name": "If-None-Match", "in": "header", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "the blob", "content": {"application/octet-stream": {}}}, "206": {"description": "the range"}, "304": {"description": "not modified"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "416": {"description": "range not satisfiable"}}},
      "head": {"summary": "headers of GET", "responses": {"200": {"description": "ok"}, "404": {"$ref": "#/components/responses/NotFound"}}},
      "put": {"summary": "upload a whole blob in one request (not resumable); Content-Length required",
        "requestBody": {"required": true, "content": {"application/octet-stream": {}}},
        "responses": {"200": {"description": "already present (body not read)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "stored"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "411": {"description": "Content-Length missing"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/uploads": {"post": {"summary": "create (or find) the upload of a blob; idempotent per hash",
      "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadRequest"}}}},
      "responses": {"200": {"description": "present, or the existing upload with its current offset", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "new upload", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/tus": {
      "options": {"security": [], "summary": "tus capabilities", "responses": {"204": {"description": "Tus-Version, Tus-Extension, Tus-Checksum-Algorithm"}}},
      "post": {"summary": "tus creation (for off-the-shelf tus clients); Upload-Metadata must carry sha256",
        "parameters": [{"name": "Upload-Length", "in": "header", "required": true, "schema": {"type": "integer"}}, {"name": "Upload-Metadata", "in": "header", "required": true, "schema": {"type": "string"}}, {"name": "Tus-Resumable", "in": "header", "schema": {"type": "string", "enum": ["1.0.0"]}}],
        "responses": {"201": {"description": "Location: the presigned upload URL"}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "412": {"description": "unsupported Tus-Resumable"}}}},
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
      "post": {"summary": "record path -> blob (idempotent); the blob must be present",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}},
        "responses": {"200": {"description": "unchanged", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "201": {"description": "recorded with a new sequence", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileRecord"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "413": {"$ref": "#/components/responses/TooLarge"}}},
      "get": {"summary": "list files under a prefix, by path, a page at a time", "parameters": [{"name": "prefix", "in": "query", "schema": {"type": "string"}}, {"name": "after", "in": "query", "schema": {"type": "string"}}, {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 5000}}],
        "responses": {"200": {"description": "files by path", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileList"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}}}},
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
