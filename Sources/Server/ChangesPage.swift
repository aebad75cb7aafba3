import Protocol

/// One page of the change feed from its two sources (new versions, deletions), each
/// read in sequence order with the page's limit: the page is the first `limit` entries
/// of both by sequence, so `nextSequence` never skips an entry of either.
struct ChangesPage {
    let records: [FileRecord]
    let deletions: [VersionDeletion]
    let nextSequence: Int64
    /// The highest sequence handed out so far.
    let latest: Int64

    init(records: [FileRecord], deletions: [VersionDeletion], since: Int64, limit: Int, latest: Int64) {
        self.latest = latest
        var r = records[...], d = deletions[...]
        var keptRecords: [FileRecord] = [], keptDeletions: [VersionDeletion] = []
        var last = since
        while keptRecords.count + keptDeletions.count < limit, r.first != nil || d.first != nil {
            let recordSequence = r.first?.sequence ?? .max
            if let deletion = d.first, deletion.sequence < recordSequence {
                keptDeletions.append(deletion); last = deletion.sequence; d.removeFirst()
            } else if let record = r.first {
                keptRecords.append(record); last = recordSequence; r.removeFirst()
            }
        }
        self.records = keptRecords
        self.deletions = keptDeletions
        nextSequence = last
    }

    var isEmpty: Bool { records.isEmpty && deletions.isEmpty }

    func response(workspace: String) -> ChangesResponse {
        ChangesResponse(changes: records, deletions: deletions, nextSequence: nextSequence, latestSequence: latest, workspace: workspace)
    }
}
