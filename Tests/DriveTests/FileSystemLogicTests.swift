import Testing
import Foundation
import Crypto
import Storage
import Backup
@testable import Drive

/// Tier one: the file system's logic called directly, no kernel involved.
@Suite(.tags(.logic)) struct FileSystemLogicTests {
    func makeFS(_ dir: TemporaryDirectory) throws -> DriveFileSystem {
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        return fs
    }

    /// Creates a file with `bytes` and closes it (one commit); returns the create's attributes.
    func store(_ fs: DriveFileSystem, _ name: String, in parent: UInt64 = 1, _ bytes: [UInt8]) throws -> NodeAttributes {
        let (a, fh) = try fs.createAndOpen(parent: parent, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, bytes, at: 0)
        try fs.flush(fh)
        fs.release(fh)
        return a
    }

    func write(_ fs: DriveFileSystem, _ fh: UInt64, _ bytes: [UInt8], at offset: Int64) throws {
        _ = try bytes.withUnsafeBytes { try fs.write(fh, $0, at: offset) }
    }

    func read(_ fs: DriveFileSystem, _ fh: UInt64, count: Int, at offset: Int64) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let n = try out.withUnsafeMutableBytes { try fs.read(fh, into: $0, at: offset) }
        return Array(out[0..<n])
    }

    /// A new workspace starts with the folders its wiring names (the camera backup's), and
    /// the drive itself makes none: it does not know what a camera roll is.
    @Test func aNewWorkspaceStartsWithTheFoldersItsWiringNames() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        #expect(try fs.lookup(parent: 1, name: Array(CameraRollRules.folderName.utf8)).isDirectory)
        let bare = try DriveFileSystem(statePath: dir.path + "/bare")
        #expect(try bare.readdir(1, after: 0, limit: 10).map(\.name) == [Array(".".utf8), Array("..".utf8)])
    }

    @Test func sequentialWritesAreHashedWithoutReadingBack() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("p.jpg".utf8), mode: 0o644, uid: 0, gid: 0)
        let bytes = pseudoRandomBytes(3_000_000, seed: 5)
        for start in stride(from: 0, to: bytes.count, by: 128 * 1024) {
            try write(fs, fh, Array(bytes[start..<min(start + 128 * 1024, bytes.count)]), at: Int64(start))
        }
        try fs.flush(fh)
        fs.release(fh)
        #expect(fs.statistics.blocksHashedWhileWriting == 1)
        #expect(fs.statistics.blocksHashedByReading == 0)
        #expect(try fs.getattr(a.ino).content == ContentHash.of(bytes: bytes))
    }

    /// The FUSE layer answers a large write before hashing it (`writeHashingLater`).
    /// Here the hashes run on other threads in the reverse order of the writes, a small
    /// write (hashed at once, in its turn) comes after them, and the flush starts before
    /// any of them ran: the tickets put the bytes into the hash in file order and the
    /// commit waits for the last one.
    @Test func writesHashedAfterTheirReplyKeepFileOrderAndTheCommitWaitsForThem() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("v.mov".utf8), mode: 0o644, uid: 0, gid: 0)
        let piece = DirtyBlock.hashAfterReplyMinimum
        let large = 6 * piece
        let bytes = pseudoRandomBytes(large + 1000, seed: 9)   // one block
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        defer { copy.deallocate() }
        copy.copyBytes(from: bytes)
        nonisolated(unsafe) let buffer = UnsafeRawBufferPointer(copy)
        var pending: [PendingHash] = []
        for start in stride(from: 0, to: large, by: piece) {
            let (n, hashing) = try fs.writeHashingLater(fh, UnsafeRawBufferPointer(rebasing: buffer[start..<(start + piece)]), at: Int64(start))
            #expect(n == piece)
            pending += hashing
        }
        #expect(pending.count == 6)
        let group = DispatchGroup()
        DispatchQueue.global().async(group: group) {
            _ = try? fs.write(fh, UnsafeRawBufferPointer(rebasing: buffer[large...]), at: Int64(large))
        }
        // The small write holds the node's lock while it waits for its turn: go on once it does.
        let node = try fs.handle(fh).node
        try eventually("the small write holds the node's lock", poll: 0.0002) {
            guard node.lock.try() else { return true }
            node.lock.unlock()
            return false
        }
        for p in pending.reversed() {
            DispatchQueue.global().async(group: group) { p.run() }
            usleep(2000)   // let each one start (and wait for its turn) before the next
        }
        try fs.flush(fh)
        group.wait()
        fs.release(fh)
        #expect(try fs.getattr(a.ino).size == Int64(bytes.count))
        #expect(fs.statistics.blocksHashedWhileWriting == 1)
        #expect(fs.statistics.blocksHashedByReading == 0)
        #expect(try fs.getattr(a.ino).content == ContentHash.of(bytes: bytes))
    }

    @Test func outOfOrderWritesFallBackToOneRead() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("r.bin".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("world".utf8), at: 6)
        try write(fs, fh, Array("hello ".utf8), at: 0)
        try fs.flush(fh)
        fs.release(fh)
        #expect(fs.statistics.blocksHashedByReading == 1)
        #expect(try fs.getattr(a.ino).content == ContentHash.of(bytes: Array("hello world".utf8)))
    }

    @Test func readsSeeTheStagingWhileWritingAndTheOldContentStaysUntilCommit() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("f".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("version one".utf8), at: 0)
        try fs.flush(fh)
        fs.release(fh)
        let oldDigest = try fs.getattr(a.ino).content

        let writer = try fs.open(a.ino, writable: true, truncate: true)
        let reader = try fs.open(a.ino, writable: false, truncate: false)
        try write(fs, writer, Array("v2".utf8), at: 0)
        #expect(try read(fs, reader, count: 100, at: 0) == Array("v2".utf8))
        // Not committed yet: the catalog still names the old content.
        #expect(try fs.catalog.attributes(a.ino).content == oldDigest)
        #expect(try fs.getattr(a.ino).size == 2)
        try fs.flush(writer)
        #expect(try fs.catalog.attributes(a.ino).content == ContentHash.of(bytes: Array("v2".utf8)))
        fs.release(writer); fs.release(reader)
        // The old block lost its last reference and is gone from the store.
        #expect(oldDigest != nil)
        #expect(!fs.blobs.contains(SHA256Hasher.digest("version one")))
    }

    @Test func attributeChangesOfAFileBeingWrittenShowAtOnceAndCommitWithIt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("t.txt".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("extracted".utf8), at: 0)
        var chmod = AttributeChanges(); chmod.mode = 0o600
        var times = AttributeChanges(); times.mtime = 1_000_000_000; times.atime = 2_000_000_000
        var chown = AttributeChanges(); chown.uid = 7; chown.gid = 8
        for change in [chown, chmod, times] { _ = try fs.setattr(a.ino, change, handle: nil) }
        // Shown at once (the kernel's permission checks use these), not yet in the catalog.
        let live = try fs.getattr(a.ino)
        #expect(live.mode & 0o7777 == 0o600 && live.uid == 7 && live.gid == 8 && live.modificationTime == 1_000_000_000)
        #expect(try fs.catalog.attributes(a.ino).mode & 0o7777 == 0o644)
        try fs.flush(fh)
        fs.release(fh)
        let committed = try fs.catalog.attributes(a.ino)
        #expect(committed.mode & 0o7777 == 0o600 && committed.uid == 7 && committed.gid == 8)
        #expect(committed.modificationTime == 1_000_000_000 && committed.atime == 2_000_000_000)
        #expect(committed.content == ContentHash.of(bytes: Array("extracted".utf8)))
    }

    /// A follower asks for the path of what changed; a folder's path is remembered, and a
    /// folder moved into or out of the Camera Roll is seen at the next commit.
    @Test func foldersMovedIntoAndOutOfTheCameraRollAreSeenAtTheNextCommit() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let recorder = PhotoRecorder()
        fs.addFollower(recorder)
        func commit(_ parent: UInt64, _ name: String) throws {
            let (_, fh) = try fs.createAndOpen(parent: parent, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
            try write(fs, fh, Array(name.utf8), at: 0)
            try fs.flush(fh); fs.release(fh)
        }
        let trip = try fs.create(parent: 1, name: Array("trip".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        let day = try fs.create(parent: trip.ino, name: Array("day1".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        try commit(day.ino, "before.jpg")
        try fs.rename(parent: 1, name: Array("trip".utf8), newParent: roll.ino, newName: Array("trip".utf8), flags: 0)
        try commit(day.ino, "inside.jpg")
        try fs.rename(parent: roll.ino, name: Array("trip".utf8), newParent: 1, newName: Array("back".utf8), flags: 0)
        try commit(day.ino, "after.jpg")
        #expect(recorder.heard.map(\.path) == ["Camera Roll/trip/day1/inside.jpg"])
        // A small file committed outside is kept in the catalog; a photo, as a block file.
        #expect(!fs.blobs.contains(SHA256Hasher.digest("after.jpg")))
        #expect(fs.blobs.contains(SHA256Hasher.digest("inside.jpg")))
    }

    /// What the backup's follower takes of a commit: the path, the version just committed,
    /// a sequence number that only grows; a rename into place, under the final name; and
    /// the settling of each file once no writable handle is left.
    @Test func photoCommitsGetTheirVersionsAndIncreasingSequenceNumbers() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let recorder = PhotoRecorder()
        fs.addFollower(recorder)
        var inodes: [UInt64] = []
        for name in ["a.jpg", "b.jpg"] {
            let (a, fh) = try fs.createAndOpen(parent: roll.ino, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
            try write(fs, fh, Array(name.utf8), at: 0)
            try fs.flush(fh); fs.release(fh)
            inodes.append(a.ino)
        }
        // Outside the Camera Roll, or a name the rule leaves out: nothing taken.
        _ = try store(fs, "notes.txt", in: roll.ino, Array("n".utf8))
        let (_, fh) = try fs.createAndOpen(parent: 1, name: Array("elsewhere".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("x".utf8), at: 0)
        try fs.flush(fh); fs.release(fh)
        // A rename into place inside the Camera Roll is taken under the final name.
        try fs.rename(parent: 1, name: Array("elsewhere".utf8), newParent: roll.ino, newName: Array("final.jpg".utf8), flags: 0)
        let sequences = recorder.heard.map(\.sequence)
        #expect(recorder.heard.map(\.path) == ["Camera Roll/a.jpg", "Camera Roll/b.jpg", "Camera Roll/final.jpg"])
        #expect(sequences == sequences.sorted() && Set(sequences).count == 3)
        let first = try #require(recorder.heard.first)
        #expect(first.version.hash == ContentHash.of(bytes: Array("a.jpg".utf8)))
        #expect(first.version.blocks == [SHA256Hasher.digest("a.jpg")] && first.version.size == 5)
        // Committed at its close while its handle was open; settled when it was released.
        #expect(!first.version.settled)
        #expect(recorder.heard[2].version.settled, "renamed with no writable handle open")
        #expect(recorder.settledInodes == inodes)
        // The numbers go on from the highest given, also in a catalog opened again.
        fs.shutdown()
        let again = try makeFS(dir)
        let later = PhotoRecorder()
        again.addFollower(later)
        _ = try store(again, "c.jpg", in: roll.ino, Array("c".utf8))
        #expect(try #require(later.heard.first).sequence > sequences.max() ?? 0)
    }

    /// A catalog made before the drive stopped telling camera-roll commits apart kept their
    /// numbers in `camera_changes`: renamed, the table goes on from its highest number, so
    /// a version queued after the upgrade is never numbered like one queued before it.
    @Test func theChangeSequenceGoesOnFromTheCameraChangesOfAnOlderCatalog() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path + "/state", withIntermediateDirectories: true)
        do {
            let old = try Database(path: dir.path + "/state/catalog.sqlite")
            try old.migrate(Array(CatalogSchema.migrations.prefix { $0.name != "drive-006-numbered-changes" }))
            try old.run("INSERT INTO camera_changes(seq, ino, path, hash, size, mtime_ns, committed_ns) VALUES (41, 9, 'Camera Roll/old.jpg', NULL, 1, 0, 0)")
            try old.run("DELETE FROM camera_changes")   // AUTOINCREMENT remembers 41 all the same
        }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        _ = try fs.recover()
        let recorder = PhotoRecorder()
        fs.addFollower(recorder)
        let roll = try fs.lookup(parent: 1, name: Array(CameraRollRules.folderName.utf8))
        _ = try store(fs, "new.jpg", in: roll.ino, Array("n".utf8))
        #expect(recorder.heard.map(\.sequence) == [42])
    }

    @Test func stagingFilesOfContentAlreadyStoredAreReusedAndStoredBlocksNeverAre() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        // Larger than InlineBlocks.limit: block files (a small file's block is staged in memory).
        let same = pseudoRandomBytes(150_000, seed: 21), other = pseudoRandomBytes(170_000, seed: 22)
        func make(_ name: String, _ bytes: [UInt8]) throws -> UInt64 {
            let (a, fh) = try fs.createAndOpen(parent: 1, name: Array(name.utf8), mode: 0o644, uid: 0, gid: 0)
            try write(fs, fh, bytes, at: 0)
            try fs.flush(fh)
            fs.release(fh)
            return a.ino
        }
        func content(_ ino: UInt64, _ count: Int) throws -> [UInt8] {
            let fh = try fs.open(ino, writable: false, truncate: false)
            defer { fs.release(fh) }
            return try read(fs, fh, count: count + 1, at: 0)
        }
        let staging = fs.blobs.stagingRoot
        let first = try make("first", same)      // its staging file becomes the stored block
        #expect(try FileIO.listDirectory(staging).isEmpty)
        let second = try make("second", same)    // the store has it: the staging file is kept as a spare
        #expect(try FileIO.listDirectory(staging).count == 1)
        let third = try make("third", other)     // takes the spare, which becomes a stored block
        #expect(try FileIO.listDirectory(staging).isEmpty)
        #expect(try content(first, same.count) == same)
        #expect(try content(second, same.count) == same)
        #expect(try content(third, other.count) == other)
        #expect(try fs.blobs.allDigests().count == 2)
        for d in try fs.blobs.allDigests() { #expect(fs.blobs.verify(d)) }
    }

    /// A deleted file's blocks leave the store at once (renamed away under the catalog's
    /// lock) and are unlinked in the background, so no request waits while the disk
    /// frees them.
    @Test func removedBlocksLeaveTheStoreAtOnceAndTheDiskInTheBackground() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let bytes = pseudoRandomBytes(Blocks.size + 100_000, seed: 31)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("big".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, bytes, at: 0)
        try fs.flush(fh); fs.release(fh)
        let digests = [SHA256Hasher.digest(Array(bytes[0..<Blocks.size])), SHA256Hasher.digest(Array(bytes[Blocks.size...]))]
        for d in digests { #expect(fs.blobs.contains(d)) }
        try fs.unlink(parent: 1, name: Array("big".utf8))
        fs.forget(a.ino, count: 1)
        for d in digests { #expect(!fs.blobs.contains(d)) }
        var left = -1
        for _ in 0..<100 where left != 0 {
            left = (try FileIO.listDirectory(fs.blobs.stagingRoot)).filter { $0.hasPrefix("removed-") }.count
            if left != 0 { usleep(20_000) }
        }
        #expect(left == 0, "removed block files still in staging")
        fs.shutdown()
    }

    @Test func aFollowersFailureRollsBackTheCommit() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let failing = PhotoRecorder()
        failing.failing = Errno.noSpace
        fs.addFollower(failing)
        defer { #expect(!failing.toldAfterFailing, "a rolled-back commit must not be announced") }
        let roll = try fs.lookup(parent: 1, name: Array("Camera Roll".utf8))
        let (a, fh) = try fs.createAndOpen(parent: roll.ino, name: Array("x.jpg".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("photo".utf8), at: 0)
        #expect(throws: Errno.noSpace) { try fs.flush(fh) }
        fs.release(fh)
        #expect(try fs.catalog.attributes(a.ino).content == nil)
        #expect(try fs.blobs.allDigests().isEmpty, "a block linked for a rolled-back commit is removed")
    }

    @Test func uncleanStopDetectsAMissingOrWrongBlobAndNeverServesIt() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        var ino: UInt64 = 0
        var digest: SHA256Digest?
        do {
            let fs = try makeFS(dir)
            let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("doc".utf8), mode: 0o644, uid: 0, gid: 0)
            // Larger than InlineBlocks.limit: a block file of its own.
            try write(fs, fh, pseudoRandomBytes(100_000, seed: 9), at: 0)
            try fs.flush(fh); fs.release(fh)
            ino = a.ino
            digest = SHA256Hasher.digest(pseudoRandomBytes(100_000, seed: 9))   // its one block
            // No shutdown(): the process "dies" here, before the flusher ran.
        }
        // Simulate what a power cut can leave: the row reached the disk, the blob's bytes did not.
        let path = dir.path + "/state/blobs/\(digest!.hex.prefix(2))/\(digest!.hex)"
        chmod(path, 0o600)
        truncate(path, 100)
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        let lost = try fs.recover()
        #expect(lost == ["doc"])
        #expect(throws: Errno.ioError) {
            let fh = try fs.open(ino, writable: false, truncate: false)
            defer { fs.release(fh) }
            _ = try read(fs, fh, count: 10, at: 0)
        }
    }

    @Test func cleanShutdownSkipsTheCheckAndFsyncMakesDurable() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        do {
            let fs = try makeFS(dir)
            let (_, fh) = try fs.createAndOpen(parent: 1, name: Array("a".utf8), mode: 0o644, uid: 0, gid: 0)
            try write(fs, fh, Array("abc".utf8), at: 0)
            try fs.fsync(fh)
            fs.release(fh)
            #expect(try fs.catalog.meta("durable_gen") == fs.catalog.withDatabase { $0.generation })
            fs.shutdown()
        }
        let fs = try DriveFileSystem.workspace(statePath: dir.path + "/state")
        #expect(try fs.catalog.meta("clean_unmount") == 1)
        #expect(try fs.recover().isEmpty)
    }

    @Test(arguments: [
        (Errno.noSuchFileOrDirectory as any Error, ENOENT),
        (Errno.notEmpty, ENOTEMPTY),
        (DatabaseError(code: 13, message: "database or disk is full", sql: nil), ENOSPC),
        (DatabaseError(code: 11, message: "malformed", sql: nil), EIO),
        (TestFailure("something else"), EIO),
    ])
    func errorsMapToErrno(error: any Error, expected: Int32) {
        #expect(errnoValue(for: error) == expected)
    }

    @Test func unlinkedOpenFileIsDeletedWhenClosedAndForgotten() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let (a, fh) = try fs.createAndOpen(parent: 1, name: Array("tmp".utf8), mode: 0o644, uid: 0, gid: 0)
        try write(fs, fh, Array("temporary".utf8), at: 0)
        try fs.flush(fh)
        try fs.unlink(parent: 1, name: Array("tmp".utf8))
        #expect(try read(fs, fh, count: 20, at: 0) == Array("temporary".utf8))
        fs.release(fh)
        #expect(try fs.getattr(a.ino).nlink == 0)   // the kernel still holds a lookup
        fs.forget(a.ino, count: 1)
        #expect(throws: Errno.noSuchFileOrDirectory) { try fs.getattr(a.ino) }
        #expect(try fs.blobs.allDigests().isEmpty)
    }

    /// rename(2) refuses to move a folder into its own subtree with EINVAL, at any depth:
    /// the check walks to the root, so a tree deeper than any fixed bound is no way around it.
    @Test func aFolderCannotBeMovedIntoItsOwnSubtreeHoweverDeep() throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let fs = try makeFS(dir)
        let depth = 5_000
        let top = try fs.create(parent: 1, name: Array("deep".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0)
        var deepest = top.ino
        for _ in 1..<depth {
            deepest = try fs.create(parent: deepest, name: Array("d".utf8), mode: UInt32(S_IFDIR) | 0o755, uid: 0, gid: 0).ino
        }
        #expect(throws: Errno(EINVAL)) {
            try fs.rename(parent: 1, name: Array("deep".utf8), newParent: deepest, newName: Array("loop".utf8), flags: 0)
        }
        // RENAME_EXCHANGE of a file at the bottom with the top folder would move the folder down.
        _ = try fs.create(parent: deepest, name: Array("f".utf8), mode: UInt32(S_IFREG) | 0o644, uid: 0, gid: 0)
        #expect(throws: Errno(EINVAL)) {
            try fs.rename(parent: deepest, name: Array("f".utf8), newParent: 1, newName: Array("deep".utf8), flags: 2)
        }
        #expect(try fs.lookup(parent: 1, name: Array("deep".utf8)).ino == top.ino)
        #expect(try fs.lookup(parent: deepest, name: Array("f".utf8)).mode & UInt32(S_IFMT) == UInt32(S_IFREG))
    }
}
