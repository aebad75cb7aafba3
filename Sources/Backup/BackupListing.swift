import Crypto

/// One entry of a `.backup/<state>/` folder. A version still being written is listed
/// under `pending` with `item.isWriting` set (`item.shownState` is "writing").
public struct BackupListing: Sendable, Equatable {
    /// Readable and unique within its folder: `CameraRollRules.flattenedName` of the path
    /// ("2024∕IMG_1.jpg"); when two items of the same state share it (two versions of
    /// one file, both pending), each gets " #<change sequence>" before its extension.
    public var name: String
    public var item: BackupItem
}

/// What the drive shows per file in `user.vdrive.backup` and `user.vdrive.content-hash`.
public struct FileBackupState: Sendable, Equatable {
    public var state: BackupItemState
    public var hash: SHA256Digest
    public var failureReason: String?
    /// False while the version is still being written (a writable handle is open).
    public var settled: Bool = true

    /// The word for `user.vdrive.backup`: the state, or "writing" for an unsettled version.
    public var shownState: String { state == .pending && !settled ? "writing" : state.rawValue }
}

extension BackupQueue {
    /// The items in one state, named for the `.backup/<state>/` folder, oldest first.
    public func listing(_ state: BackupItemState) throws -> [BackupListing] {
        let items = try items(in: state)
        var seen: [String: Int] = [:]
        for item in items { seen[CameraRollRules.flattenedName(item.path), default: 0] += 1 }
        return items.map { item in
            let flat = CameraRollRules.flattenedName(item.path)
            guard seen[flat, default: 0] > 1 else { return BackupListing(name: flat, item: item) }
            return BackupListing(name: Self.disambiguate(flat, item.changeSequence), item: item)
        }
    }

    static func disambiguate(_ name: String, _ sequence: Int64) -> String {
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot]) #\(sequence)\(name[dot...])"
        }
        return "\(name) #\(sequence)"
    }

    /// The backup state of a file's current content, for its xattrs. Keyed by content
    /// hash, which the drive knows for every file: a file renamed or moved inside the drive
    /// keeps its content and so its state, and a copy of done content is done at once.
    /// Done wins over the other states; nil when this content was never queued.
    public func fileState(hash: SHA256Digest) throws -> FileBackupState? {
        try db.queryOne("""
            SELECT state, failure_reason, settled FROM backup_items WHERE hash = ?
            ORDER BY CASE state WHEN 'done' THEN 0 WHEN 'uploading' THEN 1 WHEN 'pending' THEN 2 ELSE 3 END,
                change_sequence DESC
            LIMIT 1
            """, hash.hex) { row in
            FileBackupState(state: BackupItemState(rawValue: row.string(0) ?? "") ?? .pending, hash: hash,
                            failureReason: row.string(1), settled: row.int(2) != 0)
        }
    }
}
