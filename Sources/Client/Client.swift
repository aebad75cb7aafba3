/// Client: HTTP to the workspace server, over `HTTPClient` (libcurl).
///
/// Terms: `WorkspaceClient` speaks every call of the API (see Docs/protocol.md) on top
/// of an `HTTPConnection`; the answer to "create upload" is `.present` or a *ticket* per
/// block the server lacks, each to be sent by tus (embedded store) or by one presigned
/// S3 PUT (scaled store).
/// Thread safety: every public method is synchronous and meant for a background
/// thread; concurrent calls each take a connection of their own.
/// Imports: HTTPClient (re-exported: its `HTTPConnection`, `HTTPResult` and
/// `ClientError` are part of this target's API), Protocol, Crypto. Nothing of SQLite.
@_exported import HTTPClient
