import Drive

/// A second feed that the mirror's held tree request watches too (`records_since`), so
/// that an idle device holds one request on the server, not one per feed
/// (Docs/sync.md, "One held request per device"). `ClientMirrorServer.page` carries
/// `knownEnd` and reports the end the answer names; the mirror itself never sees it.
protocol CarriedFeed: AnyObject, Sendable {
    /// The cursor the request carries: where the feed ends as its follower knows it.
    var knownEnd: Int64 { get }
    /// The feed's end as the answer names it; nil: the server does not watch the feed
    /// with the tree's (its follower then holds a request of its own).
    func feedEnds(at latest: Int64?)
}

/// `Backups/`' records follower, told by the tree's held request.
extension RecordsFollower: CarriedFeed {}
