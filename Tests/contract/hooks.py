"""Schemathesis hooks for the workspace server's contract test (schemathesis.toml).

tus PATCH bodies are `application/offset+octet-stream` (tus 1.0): bytes, serialized
exactly as `application/octet-stream` ones. Schemathesis has no serializer for that
media type of its own, so it is registered as an alias.
"""
import schemathesis

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
