/// The OpenAPI entries of a block's chunk digests, kept apart from OpenAPI.swift's
/// document (which splices them in). Each fragment ends with a comma.
extension OpenAPI {
    static let chunkSchemas = #"""
      "BlockChunks": {"type": "object", "additionalProperties": false, "required": ["block", "size", "chunkSize", "chunks"], "properties": {"block": {"$ref": "#/components/schemas/LowerHash"}, "size": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4194304}, "chunkSize": {"type": "integer", "enum": [262144]}, "chunks": {"type": "array", "minItems": 1, "maxItems": 16, "description": "the SHA-256 of each chunkSize piece of the block, in order (the last may be shorter)", "items": {"$ref": "#/components/schemas/LowerHash"}}}},
"""#

    static let chunkPaths = #"""
    "/v1/blocks/{hash}/chunks": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "get": {"summary": "a stored block's chunk digests (computed on first request, then kept): a reader fetches the 256 KiB pieces it needs with a Range on /v1/blocks/{hash} and checks each against this list",
        "responses": {"200": {"description": "the chunk list", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BlockChunks"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
"""#
}
