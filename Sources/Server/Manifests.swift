import Crypto
import Protocol
import Storage

/// A content's manifest against the block store: which of its blocks the workspace
/// lacks (the upload plan), and the commit that makes a content present. A content
/// becomes present only in the transaction that finds every non-zero block of it
/// stored (each verified against its hash at its last tus byte) after its identity
/// was checked (`Validation.manifest`), so no partial or unverified content is visible.
extension ServerContext {
    /// One distinct non-zero block of a content, at its first position.
    struct NeededBlock: Sendable {
        let index: Int
        let digest: SHA256Digest
        let length: Int64
    }

    /// The distinct non-zero blocks of `manifest` that the workspace lacks, in file order.
    /// A stored block whose length is not the one its position needs is a 409
    /// `size_conflict`; a digest listed twice with two lengths a 422 (each entry fits the
    /// schema; together they contradict each other).
    /// `stored`: the sizes of blocks looked up already (one query for a whole batch of
    /// contents); a block not in it is looked up here.
    func absentBlocks(_ manifest: BlockManifest, stored known: [String: Int64]? = nil) throws -> [NeededBlock] {
        var first: [SHA256Digest: NeededBlock] = [:]
        var distinct: [NeededBlock] = []
        for i in manifest.blocks.indices where !manifest.isZero(i) {
            let block = NeededBlock(index: i, digest: manifest.blocks[i], length: Int64(manifest.length(ofBlock: i)))
            if let seen = first[block.digest] {
                guard seen.length == block.length else {
                    throw RequestFailure(422, "bad_request", "blocks.\(i) repeats blocks.\(seen.index) at another length (\(block.length), not \(seen.length) bytes); a block's hash fixes its bytes",
                                         field: "blocks.\(i)")
                }
                continue
            }
            first[block.digest] = block
            distinct.append(block)
        }
        let stored = try known ?? metadata.blockSizes(distinct.map(\.digest.hex))
        var absent: [NeededBlock] = []
        for block in distinct {
            // A block file without its row (killed between rename and row) is checked and recorded here.
            guard let size = try stored[block.digest.hex] ?? presentBlockSize(block.digest) else {
                absent.append(block)
                continue
            }
            guard size == block.length else {
                throw RequestFailure(409, "size_conflict", "the workspace has block \(block.digest.hex) with \(size) bytes, but position \(block.index) of a \(manifest.size)-byte content needs \(block.length)",
                                     field: "blocks.\(block.index)")
            }
        }
        return absent
    }

    /// Inside the caller's transaction: records the manifest unless a block is missing
    /// (then throws the 409 `missing_blocks` reply listing them).
    static func insertContent(_ manifest: BlockManifest, in db: any RecordSession) throws {
        let missing = try blocksMissing(manifest, in: db)
        if !missing.isEmpty { throw missingBlocks(missing) }
        try insertCheckedContent(manifest, in: db)
    }

    /// Inside the caller's transaction, which found every block of `manifest` stored
    /// (`blocksMissing` empty): records the manifest.
    static func insertCheckedContent(_ manifest: BlockManifest, in db: any RecordSession) throws {
        try db.run("INSERT INTO contents(hash, size, blocks, created_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                   manifest.content.hex, manifest.size, Metadata.encodeBlockList(manifest.blocks), now())
        try BlockNames.index(content: manifest.content.hex, blocks: nonZeroBlocks(manifest), in: db)
    }

    /// Inside the caller's transaction: the distinct non-zero blocks of `manifest` without a row.
    static func blocksMissing(_ manifest: BlockManifest, in db: any RecordSession) throws -> [String] {
        let list = db.hashTable(nonZeroBlocks(manifest))
        return try db.query("SELECT j.value FROM \(list.sql) WHERE NOT EXISTS (SELECT 1 FROM blocks b WHERE b.hash = j.value)", list.argument) { $0.string(0) ?? "" }
    }

    /// The distinct non-zero blocks of `manifest`, sorted (validated hex).
    static func nonZeroBlocks(_ manifest: BlockManifest) -> [String] {
        var nonZero = Set<String>()
        for i in manifest.blocks.indices where !manifest.isZero(i) { nonZero.insert(manifest.blocks[i].hex) }
        return nonZero.sorted()
    }

    /// Inside the caller's transaction: whether content `hex` has its manifest.
    static func contentExists(_ hex: String, in db: any RecordSession) throws -> Bool {
        try db.queryOne("SELECT 1 FROM contents WHERE hash = ?", hex, row: { _ in true }) != nil
    }

    static func contentMissing(_ hex: String) -> RequestFailure {
        RequestFailure(409, "content_missing", "the workspace has no content \(hex); send its block list ('blocks') with the record, after uploading the blocks (POST /v1/uploads)", field: "blocks")
    }

    static func missingBlocks(_ hexes: [String]) -> RequestFailure {
        RequestFailure(.json(409, ErrorResponse(error: "missing_blocks",
                                                message: "the workspace lacks \(hexes.count) block(s) of this content; upload them (POST /v1/uploads lists them with URLs), then record the file again",
                                                field: "blocks", missing: hexes)))
    }
}
