/// The OpenAPI entries of block packs (`POST /v1/blocks`, `POST /v1/blocks/fetch`), kept
/// apart from OpenAPI.swift's document (which splices them in). Each fragment ends with a comma.
extension OpenAPI {
    static let packSchemas = #"""
      "BlockPackRequest": {"type": "object", "additionalProperties": false, "required": ["hashes"], "properties": {"hashes": {"type": "array", "maxItems": 1024, "description": "blocks the workspace has, sent in this order (twice if asked twice)", "items": {"$ref": "#/components/schemas/Hash"}}}},
      "BlockPackResponse": {"type": "object", "additionalProperties": false, "required": ["stored", "present"], "properties": {"stored": {"type": "integer", "minimum": 0, "description": "records whose block this pack stored"}, "present": {"type": "integer", "minimum": 0, "description": "records whose block the workspace had already (or an earlier record of the pack stored)"}}},
      "BlockPack": {"type": "string", "format": "binary", "description": "records, each the block's SHA-256 (32 raw bytes), its length (4 bytes big-endian, 1 to 4194304), then its bytes; nothing between or after them"},
"""#

    static let packPaths = #"""
    "/v1/blocks": {
      "post": {"summary": "many blocks in one body (a block pack, at most 16 MiB; Content-Length required), stored with one durable commit; a record whose bytes do not hash to its digest, a length out of range, a zero block or a pack cut short is 400 naming the record, a block stored with another length 409: then nothing of the pack is stored",
        "requestBody": {"required": true, "content": {"application/vnd.vdrive.block-pack": {"schema": {"type": "string", "format": "binary", "maxLength": 16777216, "description": "a block pack (BlockPack)"}}}},
        "responses": {"200": {"description": "every block of the pack is stored (durably, and offered for dedup)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BlockPackResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "409": {"$ref": "#/components/responses/Conflict"}, "411": {"description": "no Content-Length (a pack is not sent chunked)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "413": {"$ref": "#/components/responses/TooLarge"}, "415": {"description": "Content-Type is not application/vnd.vdrive.block-pack", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "503": {"$ref": "#/components/responses/StoreUnavailable"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
    "/v1/blocks/fetch": {
      "post": {"summary": "many blocks in one reply (a block pack, in the order asked, at most 64 MiB); a block the workspace lacks is 404 naming it, before any byte is sent",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BlockPackRequest"}}}},
        "responses": {"200": {"description": "the blocks", "content": {"application/vnd.vdrive.block-pack": {"schema": {"$ref": "#/components/schemas/BlockPack"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "413": {"description": "more than 1024 hashes, or blocks making more than 64 MiB: ask for fewer per call", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
"""#
}
