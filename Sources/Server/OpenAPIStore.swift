/// The OpenAPI entries of the scaled block store (`--store s3://…`), kept apart from
/// OpenAPI.swift's document (which splices them in). Each fragment ends with a comma.
extension OpenAPI {
    static let storeResponses = #"""
      "StoreUnavailable": {"description": "503 store_unavailable: a server keeping blocks in an object store could not reach it (down, restarting); try again (Retry-After)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "StoreRedirect": {"description": "307 (a server keeping blocks in an object store): Location is a presigned GET of the block in the store, valid for at most an hour; send the same Range there, without the bearer token", "headers": {"Location": {"schema": {"type": "string"}}}},
"""#

    static let storePaths = #"""
    "/v1/blocks/{hash}/verify": {
      "parameters": [{"$ref": "#/components/parameters/pathHash"}],
      "post": {"summary": "after a presigned S3 PUT of a block ('kind': 's3' in the upload plan): the server reads the object once, checks its SHA-256 against {hash} and only then records the block present (offered for dedup); with the embedded store, 200 for a stored block and 404 otherwise",
        "responses": {"200": {"description": "the block was present already", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "201": {"description": "verified and recorded", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CreateUploadResponse"}}}}, "400": {"$ref": "#/components/responses/BadRequest"}, "401": {"$ref": "#/components/responses/Unauthorized"}, "404": {"$ref": "#/components/responses/NotFound"}, "460": {"$ref": "#/components/responses/ChecksumMismatch"}, "503": {"$ref": "#/components/responses/StoreUnavailable"}, "507": {"$ref": "#/components/responses/DiskFull"}}}},
"""#
}
