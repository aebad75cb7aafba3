/// The OpenAPI entries of per-device file versions, kept apart from OpenAPI.swift's
/// document (which splices them in) so the two evolve without touching each other.
/// Each fragment ends with a comma: it is followed by more entries in the document.
extension OpenAPI {
    static let versionSchemas = #"""
      "FileVersions": {"type": "object", "required": ["device", "path", "versions"], "properties": {"device": {"type": "string"}, "path": {"type": "string"}, "versions": {"type": "array", "description": "oldest first; the last is the current version; each downloadable by its hash", "items": {"$ref": "#/components/schemas/FileRecord"}}}},
"""#

    static let versionPaths = #"""
    "/v1/files/versions": {"get": {"summary": "every version of one device's path, oldest first (the last is current); versions are never replaced, only deleted by the server's admin",
      "parameters": [{"name": "device", "in": "query", "required": true, "schema": {"type": "string"}}, {"name": "path", "in": "query", "required": true, "schema": {"type": "string"}}],
      "responses": {"200": {"description": "the versions", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileVersions"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
"""#
}
