/// The OpenAPI entry of `GET /metrics` (ServerMetrics.swift), spliced into OpenAPI.swift's
/// document. It needs no device token: without `--metrics-token` it answers loopback
/// clients only (403 to others), with one it needs that bearer token (401 without).
extension OpenAPI {
    static let metricsPaths = #"""
    "/metrics": {"get": {"security": [], "summary": "the server's counters in Prometheus' text format 0.0.4 (Docs/operations.md, Metrics); with --metrics-token FILE only for 'Authorization: Bearer <that token>', without it only for loopback clients",
      "responses": {"200": {"description": "the exposition text", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401": {"description": "the server has a metrics token and the request did not carry it", "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}}, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "403": {"description": "no metrics token is configured and the client is not on a loopback address", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}}}},
"""#
}
