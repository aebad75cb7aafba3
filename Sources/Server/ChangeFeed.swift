/// The feeds a device can follow and wait on (`wait=` of their GET): a commit that adds
/// to one announces it in its transaction (`announce`) and, once committed, tells the
/// process's `ChangeNotifier` (`changed`). The announcement reaches the other server
/// processes on the same PostgreSQL (ChangeListener.swift).
enum ChangeFeed: String, CaseIterable, Sendable {
    /// `GET /v1/changes`: file versions recorded, versions the administrator deleted.
    case records
    /// `GET /v1/tree`: the workspace tree's nodes.
    case tree

    /// The PostgreSQL channel every server process of a workspace listens on; the
    /// payload names the feed.
    static let channel = "vdrive_changes"

    /// Announces a change of this feed to the other server processes, from inside the
    /// transaction that makes it: PostgreSQL delivers a notification only when its
    /// transaction commits (never for one rolled back or run again after a collision),
    /// and folds the same one sent twice in a transaction into one. Nothing on SQLite,
    /// whose server is one process (its commits wake its own requests directly).
    func announce(in db: any RecordSession) throws {
        guard db.dialect == .postgres else { return }
        _ = try db.query("SELECT pg_notify(?, ?)", Self.channel, rawValue) { _ in () }
    }
}
