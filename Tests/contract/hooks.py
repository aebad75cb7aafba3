"""Schemathesis hooks for the workspace server's contract test (schemathesis.toml).

1. tus PATCH bodies are `application/offset+octet-stream` (tus 1.0), block packs
   `application/vnd.vdrive.block-pack`: bytes, serialized exactly as
   `application/octet-stream` ones. Schemathesis has no serializer for those media
   types of its own, so they are registered as aliases. And a "positive" PATCH whose
   Upload-Checksum breaks the document's pattern (a slip of schemathesis's coverage
   phase) gets the body's real checksum.

2. Drawn hashes and presigned URLs name nothing on the server, so without help every
   download answers 404 and every tus call 403, and the fuzzer never reaches what lies
   behind them. When the test (ContractTests.swift) has stored something and says so in
   the environment, half of the schema-valid cases (chosen by a digest of the drawn
   values, so a seed replays) name it instead: a stored block, a recorded content, a
   live presigned upload. Negative cases are left alone: pinning a valid value into one
   could make it valid. Run by hand without these variables, nothing is pinned.

3. A feed request (`/v1/changes`, `/v1/tree`) with `wait` and nothing newer than its `since` is held until
   its wait ends (up to 60 s), past the fuzzer's request timeout. Every valid `wait`
   (drawn as a number or as digits, in any mode) is at most one second: the same hold
   and the same empty answer, sooner.
"""
import base64
import hashlib
import os
import re
import zlib

import schemathesis
from schemathesis.generation import GenerationMode

schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")
schemathesis.serializer.alias("application/vnd.vdrive.block-pack", "application/octet-stream")

BLOCK = os.environ.get("VDRIVE_CONTRACT_BLOCK")      # a stored block's hash
CONTENT = os.environ.get("VDRIVE_CONTRACT_CONTENT")  # a recorded content's hash
UPLOAD = os.environ.get("VDRIVE_CONTRACT_UPLOAD")    # "id hash size expires device sig" of a presigned upload


CHECKSUM = re.compile(r"^sha256 [A-Za-z0-9+/]{43}=$")  # WirePatterns.uploadChecksum


def _checksum(body):
    """`Upload-Checksum` of `body` as schemathesis will send it."""
    from schemathesis.transport.serialization import serialize_binary

    return "sha256 " + base64.b64encode(hashlib.sha256(serialize_binary(body)).digest()).decode()


def _chosen(case):
    """Every other positive case, by a digest of what was drawn."""
    drawn = repr((case.path_parameters, case.query, case.headers)).encode()
    return zlib.crc32(drawn) % 2 == 0


def _wait(value):
    """A `wait` as a number, whether schemathesis drew it as one or as its digits."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 6:
        return int(value)
    return None


@schemathesis.hook
def map_case(context, case):
    # A held feed request answers after its wait in any mode (the coverage phase also
    # calls valid values negative): every valid wait over a second becomes one second.
    wait = _wait((case.query or {}).get("wait"))
    if case.operation.path in ("/v1/changes", "/v1/tree") and wait is not None and 1 < wait <= 60:
        case.query = {**case.query, "wait": 1}
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return case
    headers = case.headers or {}
    if "Upload-Checksum" in headers and not CHECKSUM.match(str(headers["Upload-Checksum"])):
        # Schemathesis's coverage phase fills this optional header with "0" in cases it
        # calls positive, though "0" breaks its pattern; the body's real checksum is what
        # a positive case means (and exercises the server's check).
        case.headers = {**headers, "Upload-Checksum": _checksum(case.body)}
    if not _chosen(case):
        return case
    path = case.operation.path
    if CONTENT and path.startswith("/v1/contents/{hash}"):
        case.path_parameters = {**(case.path_parameters or {}), "hash": CONTENT}
    elif BLOCK and path == "/v1/blocks/{hash}":
        case.path_parameters = {**(case.path_parameters or {}), "hash": BLOCK}
    elif BLOCK and path == "/v1/blocks/fetch" and isinstance(case.body, dict):
        case.body = {**case.body, "hashes": [BLOCK]}
    elif UPLOAD and path == "/v1/tus/{id}":
        upload_id, block, size, expires, device, sig = UPLOAD.split()
        case.path_parameters = {**(case.path_parameters or {}), "id": upload_id}
        case.query = {**(case.query or {}), "hash": block, "size": size, "expires": expires, "device": device, "sig": sig}
        # A real credential, not a drawn one: schemathesis then checks that the server
        # refuses the same request without it, or with another (ignored_auth).
        case._has_explicit_auth = True
    return case
