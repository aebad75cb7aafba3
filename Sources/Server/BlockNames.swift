import Storage

/// What names a block: the one answer the garbage collection (SpaceCollector.swift), the
/// usage report (SpaceUsage.swift) and the block recorders share.
///
/// - a *content* names each block of its manifest (`content_blocks`, one row per
///   distinct block of a content, written in the transaction that records the content);
/// - an *upload in progress* (a tus upload row not completed) names its block;
/// - a content is itself named by a *file version* recording it (`file_versions.hash`),
///   and by a *tree version* (`tree_versions.hash`: a content a node of the workspace
///   tree has had, live or in the trash; the purge of the trash removes those rows).
///
/// A name added later is added here, in `contentNamed`, and every user of these
/// conditions follows.
///
/// `block_removals` is the other half of the rule "a block goes only if nothing names it
/// at the moment of removal": the collector deletes a block's row and inserts its
/// marker in one transaction, removes the bytes, then deletes the marker. A recorder
/// (an upload's last byte, a verified object, a whole-block PUT) refuses to record a
/// block while its marker stands, and checks the bytes are there inside its transaction
/// (Docs/architecture.md, "The server's garbage collection").
enum BlockNames {
    /// `server-006-space`: the block index of contents, removal markers, and the index
    /// of versions by content (the collector asks "does a version record this content").
    static let migration = Migration("server-006-space", """
    CREATE TABLE content_blocks (block TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (block, content)) WITHOUT ROWID;
    CREATE INDEX content_blocks_by_content ON content_blocks(content);
    INSERT OR IGNORE INTO content_blocks(block, content) SELECT DISTINCT j.value, c.hash FROM contents c, json_each(c.blocks) j;
    CREATE TABLE block_removals (hash TEXT PRIMARY KEY, started_at INTEGER NOT NULL) WITHOUT ROWID;
    CREATE INDEX file_versions_by_hash ON file_versions(hash);
    """)

    static let postgres = """
    CREATE TABLE content_blocks (block TEXT COLLATE "C" NOT NULL, content TEXT COLLATE "C" NOT NULL, PRIMARY KEY (block, content));
    CREATE INDEX content_blocks_by_content ON content_blocks(content);
    INSERT INTO content_blocks(block, content)
        SELECT DISTINCT j.value, c.hash FROM contents c, jsonb_array_elements_text(c.blocks::jsonb) AS j(value) ON CONFLICT DO NOTHING;
    CREATE TABLE block_removals (hash TEXT COLLATE "C" PRIMARY KEY, started_at BIGINT NOT NULL);
    CREATE INDEX file_versions_by_hash ON file_versions(hash);
    """

    /// SQL true when the content whose hash is the expression `content` is named.
    static func contentNamed(_ content: String) -> String {
        "(EXISTS (SELECT 1 FROM file_versions nv WHERE nv.hash = \(content)) OR EXISTS (SELECT 1 FROM tree_versions tv WHERE tv.hash = \(content)))"
    }

    /// SQL true when the block whose hash is the expression `block` is named right now:
    /// a content row lists it, or an upload in progress is of it. This is the re-check
    /// inside the transaction that deletes a block's row.
    static func blockNamed(_ block: String) -> String {
        "(EXISTS (SELECT 1 FROM content_blocks nb WHERE nb.block = \(block)) OR EXISTS (SELECT 1 FROM uploads nu WHERE nu.hash = \(block) AND nu.completed_at IS NULL))"
    }

    /// SQL true when the block `block` would still be named after a collection with
    /// cutoff `cutoff` (an expression): an upload in progress is of it, or a content
    /// that the collection keeps (named, or created after the cutoff) lists it. The
    /// forecast of what a collection frees; the collection re-checks `blockNamed`.
    static func blockKept(_ block: String, cutoff: String) -> String {
        """
        (EXISTS (SELECT 1 FROM uploads nu WHERE nu.hash = \(block) AND nu.completed_at IS NULL)
         OR EXISTS (SELECT 1 FROM content_blocks nb JOIN contents nc ON nc.hash = nb.content
                    WHERE nb.block = \(block) AND (nc.created_at > \(cutoff) OR \(contentNamed("nc.hash")))))
        """
    }

    /// Inside the caller's transaction: indexes a content's blocks (the manifest's
    /// distinct non-zero blocks, validated hex).
    static func index(content: String, blocks: [String], in db: any RecordSession) throws {
        let list = db.hashTable(blocks)
        try db.run("INSERT INTO content_blocks(block, content) SELECT j.value, CAST(? AS TEXT) FROM \(list.sql) WHERE true ON CONFLICT DO NOTHING",
                   content, list.argument)
    }

    /// Inside the caller's transaction: whether block `hash` may be recorded. False while
    /// a collection is removing it (its marker stands) or when `present` says its bytes
    /// are gone; asked after the transaction has begun, so a removal either shows its
    /// marker or has already taken the bytes the check looks for.
    static func mayRecord(_ hash: String, in db: any RecordSession, present: () throws -> Bool) throws -> Bool {
        if try db.queryOne("SELECT 1 FROM block_removals WHERE hash = ?", hash, row: { _ in true }) != nil { return false }
        return try present()
    }
}

/// A block could not be recorded: the collection is removing it at this moment, or its
/// bytes went before the row could be written. The uploader sends it again.
struct BlockBeingRemoved: Error, CustomStringConvertible {
    let hash: String
    var description: String { "block \(hash) was being removed by the garbage collection as it was recorded; send it again" }
}
