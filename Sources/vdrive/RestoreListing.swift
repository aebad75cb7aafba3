import Client
import Protocol

/// A device's current records streamed from `GET /v1/files` one page at a time, so a
/// restore of 100,000 files holds one page of records, not the listing.
struct RestoreListing {
    let client: WorkspaceClient
    let device: String
    /// Records per page: about 300 KB of JSON, a round trip per 1,000 files.
    var pageSize = 1_000

    /// Calls `body` with each page in order.
    func forEachPage(_ body: ([FileRecord]) -> Void) throws(ClientError) {
        var after: String?
        repeat {
            let page = try client.filesPage(device: device, prefix: "", after: after, limit: pageSize)
            body(page.files)
            after = page.next
        } while after != nil
    }
}
