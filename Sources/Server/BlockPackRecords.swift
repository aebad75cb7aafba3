import Crypto
import Protocol
import Synchronization

extension ServerContext {
    /// Records a pack's new blocks, which are in the store, in one transaction (the
    /// server's own rule for one block, `recordBlock`, applied to all of them at once).
    func recordBlocks(_ records: [PackRecord]) throws {
        guard !records.isEmpty else { return }
        try metadata.recordBlocks(records.map { ($0.digest.hex, Int64($0.length)) }, now: Self.now()) { try blocks.firstLacking(records.map(\.digest))?.hex }
        usedBytes.withLock { $0 = nil }  // counted again for the next quota check
    }
}

extension Metadata {
    /// Records blocks that are in the store, in one transaction, three statements
    /// whatever their number: refused whole (`BlockBeingRemoved`, naming the first) while
    /// the collection is removing one of them (its marker stands) or when `lacking` finds
    /// one's bytes gone; asked inside the transaction after the markers were looked for,
    /// as `BlockNames.mayRecord` does for one block. Recording a block twice keeps one row.
    func recordBlocks(_ blocks: [(hash: String, size: Int64)], now: Int64, lacking: () throws -> String?) throws {
        let hashes = blocks.map(\.hash)
        let sizes = blocks.map { String($0.size) }
        try withSession { db in
            try db.transaction {
                let list = db.hashTable(hashes)
                let removing = try db.queryOne("SELECT j.value FROM \(list.sql) JOIN block_removals r ON r.hash = j.value", list.argument) { $0.string(0) }
                if let removing { throw BlockBeingRemoved(hash: removing ?? "") }
                if let gone = try lacking() { throw BlockBeingRemoved(hash: gone) }
                switch db.dialect {
                case .sqlite:
                    // One object {hash: size}: each row is a key and its value (two arrays joined
                    // by position would be a nested loop). `WHERE true`: SQLite's parser needs it
                    // between a FROM and ON CONFLICT.
                    let object = "{" + zip(hashes, sizes).map { "\"\($0)\":\($1)" }.joined(separator: ",") + "}"
                    try db.run("INSERT INTO blocks(hash, size, created_at) SELECT key, value, ? FROM json_each(?) WHERE true ON CONFLICT DO NOTHING", now, object)
                case .postgres:
                    try db.run("INSERT INTO blocks(hash, size, created_at) SELECT u.h, u.s, ?::bigint FROM unnest(?::text[], ?::bigint[]) AS u(h, s) ON CONFLICT DO NOTHING",
                               now, list.argument, "{" + sizes.joined(separator: ",") + "}")
                }
            }
        }
    }
}
