/// The OpenAPI entries of per-device file versions, kept apart from OpenAPI.swift's
/// document (which splices them in) so the two evolve without touching each other.
/// Each fragment ends with a comma: it is followed by more entries in the document.
extension OpenAPI {
    static let versionSchemas = #"""
      "DeviceName": {"type": "string", "pattern": \#(WirePatterns.json(WirePatterns.deviceName)), "description": "1 to 64 letters, digits, '.', '_' or '-'"},
      "FileVersions": {"type": "object", "additionalProperties": false, "required": ["device", "path", "versions"], "properties": {"device": {"$ref": "#/components/schemas/DeviceName"}, "path": {"$ref": "#/components/schemas/Path"}, "versions": {"type": "array", "minItems": 1, "description": "oldest first; the last is the current version; each downloadable by its hash", "items": {"$ref": "#/components/schemas/FileRecord"}}}},
"""#

    /// The `device` query argument of `GET /v1/files` (optional there).
    static let deviceParameter = #"""
{"name": "device", "in": "query", "description": "one device's backups only; absent: every device's", "schema": {"$ref": "#/components/schemas/DeviceName"}}
"""#

    static let versionPaths = #"""
    "/v1/files/versions": {"get": {"summary": "every version of one device's path, oldest first (the last is current); versions are never replaced, only deleted by the server's administrator",
      "parameters": [{"name": "device", "in": "query", "required": true, "schema": {"$ref": "#/components/schemas/DeviceName"}}, {"name": "path", "in": "query", "required": true, "schema": {"$ref": "#/components/schemas/Path"}}],
      "responses": {"200": {"description": "the versions", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/FileVersions"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}}}},
"""#
}
