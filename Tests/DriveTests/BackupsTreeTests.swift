import Testing
import Foundation
import Crypto
import Storage
@testable import Drive

/// Tier one: the records table, the `Backups/` layout and the drive's answers for it,
/// with a fake feed (no server, no kernel).
@Suite(.tags(.logic)) struct BackupsTreeTests {
    /// The server's feed as a list: pages of it by sequence, block lists by content.
    final class FakeFeed: RemoteRecords, @unchecked Sendable {
        var entries: [RemoteChange] = []
        var blockLists: [SHA256Digest: [SHA256Digest]] = [:]
        var down = false
        var workspace: String? = "00112233445566778899aabbccddeeff"
        func changes(since: Int64, limit: Int) throws(RemoteFailure) -> RemoteChangePage {
            if down { throw .unavailable("connection refused") }
            let page = Array(entries.filter { $0.sequence > since }.prefix(limit))
            return RemoteChangePage(changes: page, nextSequence: page.last?.sequence ?? since, latestSequence: entries.last?.sequence ?? 0,
                                    workspace: workspace)
        }
        func blockList(of content: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest] {
            guard let list = blockLists[content] else { throw .missing("no such content") }
            return list
        }
        var nextSequence: Int64 { (entries.last?.sequence ?? 0) + 1 }
        @discardableResult
        func record(_ device: String, _ path: String, _ bytes: [UInt8], captured: Int64?, mtime: Int64 = 1_600_000_000, at recorded: Int64 = 1_700_000_000) -> RemoteVersion {
            let content = ContentHash.of(bytes: bytes)
            blockLists[content] = [SHA256Hasher.digest(bytes)]
            let v = RemoteVersion(sequence: nextSequence, device: device, path: path, content: content, size: Int64(bytes.count),
                                  captureDate: captured, mtime: mtime, recordedAt: recorded)
            entries.append(.recorded(v))
            return v
        }
        func delete(_ v: RemoteVersion) { entries.append(.deleted(sequence: nextSequence, version: v.sequence)) }
    }

    /// Every path of a tree with its node and folder count (not its inode number: rows
    /// built again are numbered anew), for comparing two trees.
    static func walk(_ tree: BackupsTree) -> [String: String] {
        var out: [String: String] = [:]
        var folders = [""]
        while let folder = folders.popLast() {
            out[folder] = tree.item(at: folder).map { "\($0.node) \($0.subfolders ?? -1)" }
            for e in tree.entries(in: folder) ?? [] {
                let path = folder.isEmpty ? e.name : folder + "/" + e.name
                if e.isDirectory { folders.append(path) } else { out[path] = tree.node(at: path).map { "\($0)" } }
            }
        }
        return out
    }

    static let july2019: Int64 = 1_563_000_000     // 2019-07-13 UTC
    static let march2015: Int64 = 1_425_200_000    // 2015-03-01 UTC

    struct Setup {
        let dir: TemporaryDirectory
        let fs: DriveFileSystem
        let table: RecordsTable
        let tree: BackupsTree
        let feed = FakeFeed()

        init() throws {
            dir = TemporaryDirectory()
            fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
            _ = try fs.recover()
            table = try RecordsTable(catalogPath: fs.catalogPath)
            tree = try BackupsTree(table: table)
            fs.virtualTrees.append(tree)
            fs.remoteReads = RemoteReads(table: table, remote: feed)
        }

        /// Follows the feed as a mount does (the rows kept up to date page by page), and
        /// checks the tree against rows built from scratch from a copy of the records.
        func sync() throws {
            try RecordsFollower.catchUp(table, from: feed, pageSize: 2)
            let copy = dir.path + "/rebuilt.db"
            try? FileManager.default.removeItem(atPath: copy)
            try Database(path: fs.catalogPath).execute("VACUUM INTO '\(copy)'")
            let rebuilt = try Database(path: copy)
            try rebuilt.transaction { try BackupsRows.rebuild(rebuilt) }
            let fresh = try BackupsTree(table: RecordsTable(catalogPath: copy))
            #expect(BackupsTreeTests.walk(tree) == BackupsTreeTests.walk(fresh), "the rows kept page by page differ from a full build")
        }

        func names(_ path: String) -> [String] { (tree.entries(in: path) ?? []).map(\.name).sorted() }
    }

    /// The server is restored from a copy older than what this drive learned: its feed
    /// ends before the drive's cursor, and the sequences after it are handed out again
    /// to new versions. The drive learns the feed again from the start: the versions the
    /// server forgot leave `Backups/`, the new ones (numbered below the old cursor) come.
    @Test func aFeedThatEndsBeforeTheCursorIsLearnedAgain() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "Camera Roll/kept.jpg", [1], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/forgotten-1.jpg", [2], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/forgotten-2.jpg", [3], captured: Self.july2019)
        try s.sync()
        #expect(s.names("phone/2019/07") == ["forgotten-1.jpg", "forgotten-2.jpg", "kept.jpg"])
        #expect(try s.table.cursor() == 3)

        s.feed.entries = Array(s.feed.entries.prefix(1))   // the older copy
        s.feed.record("laptop", "Camera Roll/new.jpg", [4], captured: Self.july2019)   // sequence 2 again
        try s.sync()
        #expect(s.names("") == ["laptop", "phone"])
        #expect(s.names("phone/2019/07") == ["kept.jpg"])
        #expect(s.names("laptop/2019/07") == ["new.jpg"])
        #expect(try s.table.cursor() == 2)
    }

    /// The drive pointed at another workspace (another server at the same address, or one
    /// set up again) whose feed is longer than this drive's cursor: without the identity
    /// the drive would keep the first workspace's records and skip the new one's first.
    @Test func aFeedOfAnotherWorkspaceReplacesTheRecords() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "Camera Roll/old.jpg", [1], captured: Self.july2019)
        try s.sync()
        #expect(try s.table.workspace() == "00112233445566778899aabbccddeeff")

        s.feed.workspace = "ffeeddccbbaa99887766554433221100"
        s.feed.entries = []
        s.feed.record("tablet", "Camera Roll/a.jpg", [2], captured: Self.july2019)
        s.feed.record("tablet", "Camera Roll/b.jpg", [3], captured: Self.july2019)
        try s.sync()
        #expect(s.names("") == ["tablet"])
        #expect(s.names("tablet/2019/07") == ["a.jpg", "b.jpg"])
        #expect(try s.table.cursor() == 2)
        #expect(try s.table.workspace() == "ffeeddccbbaa99887766554433221100")

        // A server that does not say (older) changes nothing.
        s.feed.workspace = nil
        s.feed.record("tablet", "Camera Roll/c.jpg", [4], captured: Self.july2019)
        try s.sync()
        #expect(s.names("tablet/2019/07") == ["a.jpg", "b.jpg", "c.jpg"])
        #expect(try s.table.workspace() == "ffeeddccbbaa99887766554433221100")
    }

    @Test func filesAreFiledByDeviceYearAndMonthWithSizesAndDates() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [1, 2, 3], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/no-date.png", [4, 5], captured: nil, mtime: Self.march2015)
        s.feed.record("laptop", "Camera Roll/IMG_0001.jpg", [9], captured: Self.july2019)
        try s.sync()
        #expect(s.names("") == ["laptop", "phone"])
        #expect(s.names("phone") == ["2015", "2019"])
        #expect(s.names("phone/2019/07") == ["IMG_0001.jpg"])
        #expect(s.names("phone/2015/03") == ["no-date.png"], "no capture date: filed by mtime")
        #expect(s.tree.node(at: "phone/2019/07/IMG_0001.jpg") == .remote(RemoteFile(content: ContentHash.of(bytes: [1, 2, 3]), size: 3, mtime: Self.july2019)))

        // Through the file system: sizes and capture dates as mtime, without any content.
        let backups = try s.fs.lookup(parent: 1, name: Array("Backups".utf8))
        #expect(try s.fs.readdir(1, after: 0, limit: 100).map { String(decoding: $0.name, as: UTF8.self) } == [".", "..", "Camera Roll", "Backups"])
        var ino = backups.ino
        for name in ["phone", "2019", "07"] { ino = try s.fs.lookup(parent: ino, name: Array(name.utf8)).ino }
        let a = try s.fs.lookup(parent: ino, name: Array("IMG_0001.jpg".utf8))
        #expect(a.size == 3 && a.statValue().st_mtim.tv_sec == Int(Self.july2019) && a.mode == UInt32(S_IFREG) | 0o444)
        #expect(try s.fs.getattr(ino).statValue().st_mtim.tv_sec == Int(Self.july2019), "a folder is dated by its newest file")
    }

    /// A month of thousands of photos is listed a reply buffer at a time: every name once,
    /// in order, whatever the page size, and each page holds at most what was asked.
    @Test func aLargeFolderIsListedPageByPage() throws {
        let s = try Setup(); defer { s.dir.remove() }
        for i in 0..<1_500 { s.feed.record("phone", "Camera Roll/IMG_\(10_000 + i).jpg", [UInt8(i & 0xFF)], captured: Self.july2019) }
        try s.sync()
        var ino = try s.fs.lookup(parent: 1, name: Array("Backups".utf8)).ino
        for name in ["phone", "2019", "07"] { ino = try s.fs.lookup(parent: ino, name: Array(name.utf8)).ino }
        for limit in [1, 16, 100, 5_000] {
            var names: [String] = []
            var after: Int64 = 0
            while true {
                let page = try s.fs.readdir(ino, after: after, limit: limit)
                #expect(page.count <= limit)
                guard let last = page.last else { break }
                #expect(page.map(\.offset) == page.map(\.offset).sorted() && page[0].offset > after)
                names += page.map { String(decoding: $0.name, as: UTF8.self) }
                after = last.offset
            }
            #expect(names == [".", ".."] + (0..<1_500).map { "IMG_\(10_000 + $0).jpg" }, "page size \(limit)")
        }
    }

    @Test func aNameTakenInAFolderGetsASuffixThatNeverChanges() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [1], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/2019/IMG_0001.jpg", [2], captured: Self.july2019)
        try s.sync()
        #expect(s.names("phone/2019/07") == ["IMG_0001 (2).jpg", "IMG_0001.jpg"])
        // Later records (another collider, a file really named "IMG_0001 (3).jpg", a new
        // version of the first) change no name already given.
        s.feed.record("phone", "Old/IMG_0001 (3).jpg", [3], captured: Self.july2019)
        s.feed.record("phone", "Trip/IMG_0001.jpg", [4], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [5], captured: Self.july2019)
        try s.sync()
        #expect(s.names("phone/2019/07") == [".versions", "IMG_0001 (2).jpg", "IMG_0001 (3).jpg", "IMG_0001 (4).jpg", "IMG_0001.jpg"])
        #expect(s.tree.node(at: "phone/2019/07/IMG_0001.jpg") == .remote(RemoteFile(content: ContentHash.of(bytes: [5]), size: 1, mtime: Self.july2019)))
        #expect(s.tree.node(at: "phone/2019/07/IMG_0001 (2).jpg") == .remote(RemoteFile(content: ContentHash.of(bytes: [2]), size: 1, mtime: Self.july2019)))
        #expect(s.tree.node(at: "phone/2019/07/IMG_0001 (4).jpg") == .remote(RemoteFile(content: ContentHash.of(bytes: [4]), size: 1, mtime: Self.july2019)))
        // The same after a restart: the names are in the table, not in memory.
        let again = try BackupsTree(table: try RecordsTable(catalogPath: s.fs.catalogPath))
        #expect((again.entries(in: "phone/2019/07") ?? []).map(\.name).sorted() == s.names("phone/2019/07"))
    }

    @Test func olderVersionsAreInVersionsAndFollowReRecordsAndDeletions() throws {
        let s = try Setup(); defer { s.dir.remove() }
        let v1 = s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [1], captured: Self.july2019, at: 1_764_504_000)   // 2025-11-30 12:00:00
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [2], captured: Self.july2019, at: 1_764_504_900)
        try s.sync()
        #expect(s.names("phone/2019/07/.versions") == ["IMG_0001 (2025-11-30 120000).jpg"])
        #expect(s.tree.node(at: "phone/2019/07/.versions/IMG_0001 (2025-11-30 120000).jpg") == .remote(RemoteFile(content: v1.content, size: 1, mtime: Self.july2019)))
        // The current content recorded again with a new date: the same version, moved (no new .versions entry).
        let moved = s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [2], captured: Self.march2015, at: 1_764_505_000)
        try s.sync()
        #expect(s.names("phone/2015/03") == [".versions", "IMG_0001.jpg"])
        #expect(s.names("phone/2015/03/.versions") == ["IMG_0001 (2025-11-30 120000).jpg"])
        #expect(s.tree.entries(in: "phone/2019") == nil, "the old folder is gone with its only file")
        // The administrator deletes the current version: the older one is current again, in its own month.
        s.feed.delete(moved)
        try s.sync()
        #expect(s.names("phone") == ["2019"])
        #expect(s.names("phone/2019/07") == ["IMG_0001.jpg"])
        #expect(s.tree.node(at: "phone/2019/07/IMG_0001.jpg") == .remote(RemoteFile(content: v1.content, size: 1, mtime: Self.july2019)))
        s.feed.delete(v1)
        try s.sync()
        #expect(s.names("") == [], "every version deleted: the device's folder goes")
    }

    @Test func applyingAPageTwiceChangesNothing() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "a.jpg", [1], captured: Self.july2019)
        s.feed.record("phone", "a.jpg", [2], captured: Self.july2019)
        let page = try s.feed.changes(since: 0, limit: 10)
        #expect(try s.table.apply(page) == [RecordKey(device: "phone", path: "a.jpg")])
        // A second process (the sync task beside a mount) applying the same page.
        #expect(try s.table.apply(page).isEmpty)
        #expect(try s.table.versions().count == 2)
        #expect(try s.table.cursor() == 2)
    }

    @Test func readsCheckTheBlockListAndEverythingIsReadOnly() throws {
        let s = try Setup(); defer { s.dir.remove() }
        // A photo this drive holds itself: its block is in the local store.
        let bytes = Array("a photo's bytes".utf8)
        let fd = try s.fs.createAndOpen(parent: 1, name: Array("local.jpg".utf8), mode: 0o644, uid: 0, gid: 0).1
        _ = try bytes.withUnsafeBytes { try s.fs.write(fd, $0, at: 0) }
        try s.fs.flush(fd); s.fs.release(fd)
        s.feed.record("phone", "Camera Roll/local.jpg", bytes, captured: Self.july2019)
        let lying = s.feed.record("phone", "Camera Roll/lying.jpg", [7, 7], captured: Self.july2019)
        s.feed.blockLists[lying.content] = [SHA256Hasher.digest([8, 8])]   // a list that is not the content's
        try s.sync()
        var ino = try s.fs.lookup(parent: 1, name: Array("Backups".utf8)).ino
        for name in ["phone", "2019", "07"] { ino = try s.fs.lookup(parent: ino, name: Array(name.utf8)).ino }
        let file = try s.fs.lookup(parent: ino, name: Array("local.jpg".utf8))
        let h = try s.fs.open(file.ino, writable: false, truncate: false)
        var buf = [UInt8](repeating: 0, count: 100)
        let n = try buf.withUnsafeMutableBytes { try s.fs.read(h, into: $0, at: 0) }
        #expect(Array(buf[0..<n]) == bytes)
        s.fs.release(h)
        #expect(try s.table.blockList(of: file.content!) != nil, "the block list is kept after the first read")
        let bad = try s.fs.open(try s.fs.lookup(parent: ino, name: Array("lying.jpg".utf8)).ino, writable: false, truncate: false)
        #expect(throws: Errno.ioError) { _ = try buf.withUnsafeMutableBytes { try s.fs.read(bad, into: $0, at: 0) } }
        s.fs.release(bad)

        #expect(throws: Errno(EROFS)) { _ = try s.fs.open(file.ino, writable: true, truncate: false) }
        #expect(throws: Errno(EROFS)) { _ = try s.fs.create(parent: ino, name: Array("new.jpg".utf8), mode: 0o644, uid: 0, gid: 0) }
        #expect(throws: Errno(EROFS)) { try s.fs.unlink(parent: ino, name: Array("local.jpg".utf8)) }
        #expect(throws: Errno(EROFS)) { try s.fs.rename(parent: ino, name: Array("local.jpg".utf8), newParent: 1, newName: Array("x".utf8), flags: 0) }
        #expect(throws: Errno(EROFS)) { try s.fs.rename(parent: 1, name: Array("local.jpg".utf8), newParent: ino, newName: Array("x".utf8), flags: 0) }
        #expect(throws: Errno(EROFS)) { _ = try s.fs.setattr(file.ino, { var c = AttributeChanges(); c.mode = 0o644; return c }(), handle: nil) }
        #expect(throws: Errno.notPermitted) { try s.fs.rmdir(parent: 1, name: Array("Backups".utf8)) }
    }

    /// A new version at the same path is a new inode (the kernel's cached pages of the
    /// old one are never served as the new one's); a handle open before reads the old.
    @Test func aNewVersionIsANewInodeAndAnOpenHandleKeepsItsVersion() throws {
        let s = try Setup(); defer { s.dir.remove() }
        let old = Array("old photo".utf8), new = Array("new photo, longer".utf8)
        for (name, bytes) in [("old.jpg", old), ("new.jpg", new)] {   // blocks this drive holds
            let fh = try s.fs.createAndOpen(parent: 1, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0).1
            _ = try bytes.withUnsafeBytes { try s.fs.write(fh, $0, at: 0) }
            try s.fs.flush(fh); s.fs.release(fh)
        }
        s.feed.record("phone", "IMG.jpg", old, captured: Self.july2019)
        try s.sync()
        var month = try s.fs.lookup(parent: 1, name: Array("Backups".utf8)).ino
        for name in ["phone", "2019", "07"] { month = try s.fs.lookup(parent: month, name: Array(name.utf8)).ino }
        let first = try s.fs.lookup(parent: month, name: Array("IMG.jpg".utf8))
        let fh = try s.fs.open(first.ino, writable: false, truncate: false)
        s.feed.record("phone", "IMG.jpg", new, captured: Self.july2019)
        try s.sync()
        let second = try s.fs.lookup(parent: month, name: Array("IMG.jpg".utf8))
        #expect(second.ino != first.ino && second.size == Int64(new.count))
        var buf = [UInt8](repeating: 0, count: 64)
        let n = try buf.withUnsafeMutableBytes { try s.fs.read(fh, into: $0, at: 0) }
        #expect(Array(buf[0..<n]) == old, "the handle reads the version it opened")
        s.fs.release(fh)
    }

    /// The tree's rows number its inodes: a file keeps its number while it shows the same
    /// version at the same place (other files changing, the drive restarting), and a
    /// number once given never names another file, not even after its file is gone.
    @Test func inodeNumbersStayWithTheirFileAndAreNeverReused() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "a.jpg", [1], captured: Self.july2019)
        let b = s.feed.record("phone", "b.jpg", [2], captured: Self.july2019)
        try s.sync()
        func ino(_ path: String, _ tree: BackupsTree? = nil) -> UInt64? { (tree ?? s.tree).item(at: path)?.ino }
        let a = try #require(ino("phone/2019/07/a.jpg"))
        let oldB = try #require(ino("phone/2019/07/b.jpg"))
        s.feed.record("phone", "c.jpg", [3], captured: Self.july2019)
        s.feed.record("phone", "b.jpg", [4], captured: Self.july2019)   // b's new version: a new inode
        s.feed.delete(b)   // ... and its older one deleted again
        try s.sync()
        #expect(ino("phone/2019/07/a.jpg") == a)
        let newB = try #require(ino("phone/2019/07/b.jpg"))
        #expect(newB != oldB && s.tree.path(ofInode: oldB) == nil, "the old version's number names nothing")
        #expect(s.tree.path(ofInode: newB) == "phone/2019/07/b.jpg")
        // The file with the highest number goes, another comes: it gets a number of its own.
        let highest = try #require(["a.jpg", "b.jpg", "c.jpg"].compactMap { ino("phone/2019/07/" + $0) }.max())
        let victim = try #require(s.tree.path(ofInode: highest))
        s.feed.delete(try #require(s.feed.entries.compactMap { entry -> RemoteVersion? in
            if case .recorded(let v) = entry, "phone/2019/07/" + v.path == victim { return v } else { return nil }
        }.last))
        try s.sync()
        s.feed.record("phone", "d.jpg", [5], captured: Self.july2019)
        try s.sync()
        #expect(try #require(ino("phone/2019/07/d.jpg")) > highest)
        // A restart: the same numbers, from the same rows.
        let again = try BackupsTree(table: try RecordsTable(catalogPath: s.fs.catalogPath))
        #expect(ino("phone/2019/07/a.jpg", again) == a)
        // Through the drive: lookup and getattr agree with the tree's number.
        var month = try s.fs.lookup(parent: 1, name: Array("Backups".utf8)).ino
        for name in ["phone", "2019", "07"] { month = try s.fs.lookup(parent: month, name: Array(name.utf8)).ino }
        #expect(try s.fs.lookup(parent: month, name: Array("a.jpg".utf8)).ino == a)
        #expect(try s.fs.getattr(a).size == 1)
        #expect(throws: Errno.noSuchFileOrDirectory) { _ = try s.fs.getattr(oldB) }
    }

    /// A catalog that learned its records before `Backups/` was rows of it gets its rows
    /// from those records when it is opened (the migration), names and versions included.
    @Test func recordsLearnedBeforeTheRowsAreShownAfterTheMigration() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [1], captured: Self.july2019)
        s.feed.record("phone", "Trip/IMG_0001.jpg", [2], captured: Self.july2019)
        s.feed.record("phone", "Camera Roll/IMG_0001.jpg", [3], captured: Self.july2019)
        s.feed.record("laptop", "x.png", [4], captured: nil, mtime: Self.march2015)
        try s.sync()
        let before = Self.walk(s.tree)
        let db = try Database(path: s.fs.catalogPath)
        try db.execute("DROP TABLE backups_entries; DELETE FROM sqlite_sequence WHERE name = 'backups_entries'")
        try db.run("DELETE FROM schema_migrations WHERE name = ?", BackupsRows.migration.name)
        let fs = try DriveFileSystem.workspace(statePath: s.dir.path + "/state")   // opening migrates
        let tree = try BackupsTree(table: try RecordsTable(catalogPath: fs.catalogPath))
        #expect(Self.walk(tree) == before)
        #expect((tree.entries(in: "phone/2019/07") ?? []).map(\.name).sorted() == [".versions", "IMG_0001 (2).jpg", "IMG_0001.jpg"])
    }

    @Test func aWorkspaceFolderCalledBackupsIsNotHidden() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        #expect(!fs.rootHasEntry(named: "Backups"))
        _ = try fs.create(parent: 1, name: Array("Backups".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        #expect(fs.rootHasEntry(named: "Backups"))
        // The wiring then names the tree otherwise: both are listed, the user's folder stays writable.
        fs.virtualTrees.append(try BackupsTree(table: try RecordsTable(catalogPath: fs.catalogPath), rootName: BackupsTree.alternativeRootName))
        #expect(try fs.readdir(1, after: 0, limit: 100).map { String(decoding: $0.name, as: UTF8.self) }
                == [".", "..", "Camera Roll", "Backups", "Backups (all devices)"])
        let mine = try fs.lookup(parent: 1, name: Array("Backups".utf8))
        #expect(!VirtualInodes.contains(mine.ino))
        _ = try fs.create(parent: mine.ino, name: Array("notes.txt".utf8), mode: 0o644, uid: 0, gid: 0)
    }

    /// Seeded random feeds (new files, new versions, re-records with other dates,
    /// deletions, across devices and months), followed a few entries at a time: the tree
    /// updated in place always equals a full build, and names never change.
    @Test(arguments: [11, 12, 13, 14]) func randomFeedsKeepTheTreeAndTheNames(seed: Int) throws {
        print("BackupsTreeTests random feed seed \(seed)")
        let s = try Setup(); defer { s.dir.remove() }
        var rng = SeededGenerator(seed: UInt64(seed))
        var recorded: [RemoteVersion] = []
        var given: [String: String] = [:]   // device, path, folder -> name shown
        for _ in 0..<40 {
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let roll = Int.random(in: 0..<10, using: &rng)
                if roll < 2, let victim = recorded.randomElement(using: &rng) {
                    s.feed.delete(victim)
                    recorded.removeAll { $0.sequence == victim.sequence }
                } else {
                    let device = ["phone", "laptop"].randomElement(using: &rng)!
                    let path = ["a/IMG_1.jpg", "b/IMG_1.jpg", "IMG_1.jpg", "IMG_1 (2).jpg", "c.png"].randomElement(using: &rng)!
                    let month = [Self.july2019, Self.march2015].randomElement(using: &rng)!
                    let bytes: [UInt8] = [UInt8.random(in: 0...3, using: &rng)]
                    recorded.append(s.feed.record(device, path, bytes, captured: month, at: 1_700_000_000 + Int64(s.feed.nextSequence)))
                }
            }
            try s.sync()
            for (key, names) in try s.table.names() {
                for (folder, name) in names {
                    let id = "\(key.device)|\(key.path)|\(folder)"
                    #expect(given[id] == nil || given[id] == name, "\(id) was \(given[id] ?? "") and is now \(name) (seed \(seed))")
                    given[id] = name
                }
            }
        }
    }

    @Test func theServerDownKeepsTheLastKnownRecords() throws {
        let s = try Setup(); defer { s.dir.remove() }
        s.feed.record("phone", "a.jpg", [1], captured: Self.july2019)
        try s.sync()
        s.feed.down = true
        #expect(throws: RemoteFailure.self) { try RecordsFollower.catchUp(s.table, from: s.feed) }
        #expect(s.names("phone/2019/07") == ["a.jpg"])
    }
}

