import Foundation
import Synchronization
import Crypto
import Storage

/// Blocks the drive does not hold, fetched from the server on demand and kept.
///
/// A read of part of a block that is not here fetches only the `Blocks.chunkSize` chunks
/// covering the range, checks each against its chunk digest (the block's chunk list is
/// fetched once and kept in the catalog) before any byte of it is served, and keeps it
/// in the block's partial file (`blobs/partial/<hash>`), recording the chunk as verified
/// in the catalog only after its bytes were written. When every chunk is there, the
/// whole file is checked against the block's SHA-256 and adopted into the store: from
/// then on it is an ordinary block. Which chunks a read asks for is the reader's window
/// (ReadaheadWindow.swift); once it has grown to a block, the reader fetches whole blocks
/// (one request each, checked against the block's SHA-256) and the next ones ahead of
/// it, as non-interactive work the policy may hold.
///
/// Nothing from the server is trusted: a chunk that fails its digest is fetched once
/// more, then the read fails with EIO. The server being unreachable fails the read with
/// EIO after the remote's own timeout, with one log line per outage (not per read).
///
/// A damaged block (found wrong after an unclean stop) is fetched the same way, whole,
/// and replaces the bad file: self-heal.
///
/// Locks: `state` is a leaf; `busy` serialises the fetches of one block (a reader waits
/// for a prefetch of the same block instead of fetching it twice). May be called with an
/// `OpenNode` lock held (the draft's reads); takes the catalog lock only inside calls.
/// `@unchecked Sendable`: mutable state is in `Mutex`es and the `busy` condition.
public final class BlockCache: @unchecked Sendable {
    let catalog: Catalog
    let blobs: BlobStore
    let partialRoot: String

    private struct State {
        var remote: RemoteContent?
        var damaged: Set<SHA256Digest> = []
        var uses: [SHA256Digest: Int64] = [:]
        var outageLogged = false
        /// The server could not confirm originals for optimize storage (logged once).
        var confirmationOutageLogged = false
        var prefetching: Set<SHA256Digest> = []
        var stats = Statistics()
        var beforeStoreWrite: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())
    private let busy = NSCondition()
    private var busyHashes: Set<SHA256Digest> = []
    /// At most this many prefetches at once, whatever the number of readers (each holds
    /// a connection and a thread while it waits on the network). As many as the blocks
    /// asked ahead: with four, a fetch was often waiting for a thread (measured).
    private let prefetchWorkers = BlockingWorkers(name: "vd-prefetch", limit: prefetchDepth)
    /// Prefetched blocks are written to the store here, after they were published: the
    /// O_DIRECT write waits for the disk (4.5 ms per 4 MiB block measured, a quarter of
    /// a prefetch's time), and the prefetch thread is free for the next fetch meanwhile.
    /// Two threads keep up with the disk; past `storeBacklog` blocks waiting, a prefetch
    /// writes its own block (each waiting block holds 4 MiB of memory).
    private let storeWriters = BlockingWorkers(name: "vd-store", limit: 2)
    static let storeBacklog = 4
    /// Blocks fetched ahead of a sequential reader at once (24 MiB). Each fetch waits a
    /// few milliseconds for the server's first byte and its disk; six in flight kept a
    /// cold read of 1 GiB at 0.96-1.08 GB/s, four at 0.88-1.01 (benchmarks.md, "Online-only
    /// content"), for about 10 MB more of the mount's peak memory.
    static let prefetchDepth = 6
    /// Blocks fetched whole for a sequential reader, in memory until served once.
    /// Its pool covers them and the fetches in flight (the prefetches and a reader's).
    let fetched = FetchedBlocks(limit: prefetchDepth + 2, poolLimit: 2 * prefetchDepth + 3)

    /// Counters for tests, `vdrive status` and benchmarks.
    public struct Statistics: Sendable {
        public var chunksFetched = 0
        public var blocksFetched = 0
        public var bytesFetched: Int64 = 0
        public var digestMismatches = 0
        public var blocksAdopted = 0
        public var blocksHealed = 0
    }
    public var statistics: Statistics { state.withLock { $0.stats } }

    init(catalog: Catalog, blobs: BlobStore) throws {
        self.catalog = catalog
        self.blobs = blobs
        partialRoot = blobs.root + "/partial"
        try FileIO.makeDirectories(partialRoot)
    }

    /// Where bytes of blocks not held here come from (the daemon sets it; nil: no server,
    /// reads of such blocks fail with EIO).
    public var remote: RemoteContent? {
        get { state.withLock { $0.remote } }
        set { state.withLock { $0.remote = newValue } }
    }

    /// Tests only: runs on a store thread before it writes a prefetched block (a test
    /// holds the writes back to read the block again while one is pending).
    var beforeStoreWrite: (@Sendable () -> Void)? {
        get { state.withLock { $0.beforeStoreWrite } }
        set { state.withLock { $0.beforeStoreWrite = newValue } }
    }

    // MARK: The public read

    /// Bytes `[offset, offset + count)` of block `hash`, `length` bytes long (cut at its
    /// end). From the store when the block is here, else fetched as described above.
    /// `interactive`: a user's read waits for it (always allowed); false for bulk work.
    /// Throws `Errno.ioError` when the bytes cannot be had (server down, block missing
    /// there, a wrong chunk twice).
    public func read(_ hash: SHA256Digest, length: Int, at offset: Int, count: Int, interactive: Bool) throws -> [UInt8] {
        let end = min(length, offset + count)
        guard offset >= 0, offset < end else { return [] }
        let source = try descriptor(hash, length: length, range: offset..<end, interactive: interactive, whole: false)
        var out = [UInt8](repeating: 0, count: end - offset)
        let n = try out.withUnsafeMutableBytes { try FileIO.pread(source.fd, into: $0, at: Int64(offset)) }
        if n < out.count {
            DriveLog.error("block \(hash.hex) is shorter than its \(length) bytes in the store: the read fails with EIO")
            throw Errno.ioError
        }
        return out
    }

    /// Starts fetching a block in the background, as non-interactive work (held while
    /// paused or metered), unless it is here or already on its way. `knownNotHeld`: the
    /// caller learned from the catalog that the block is online-only, so the store is
    /// not asked here, on the reader's path (a cold folder waits for the disk); the
    /// fetch asks it again before it fetches.
    public func prefetch(_ hash: SHA256Digest, length: Int, knownNotHeld: Bool = false) {
        if !knownNotHeld, (!isDamaged(hash) && blobs.contains(hash)) || (try? catalog.isPacked(hash)) == true { return }
        if fetched.holds(hash) { return }
        let start = state.withLock { s -> Bool in
            guard s.remote != nil, !s.prefetching.contains(hash) else { return false }
            s.prefetching.insert(hash)
            return true
        }
        guard start else { return }
        prefetchWorkers.run { [self] in
            defer { _ = state.withLock { $0.prefetching.remove(hash) } }
            prefetchWhole(hash, length: length)
        }
    }

    /// Small blocks fetched ahead together (the files another device just made): a few
    /// exchanges for many blocks instead of one each. Blocks held, being fetched, or
    /// partly here are left out (the last go the one-block way, which resumes them).
    public func prefetch(_ blocks: [(hash: SHA256Digest, length: Int)]) {
        var wanted: [(hash: SHA256Digest, length: Int)] = []
        var seen = Set<SHA256Digest>()
        let unique = blocks.filter { $0.length > 0 && seen.insert($0.hash).inserted }
        // One question to the catalog for all of them (not a lock and a stat each); if it
        // fails, all are asked again under their claims before anything is fetched.
        let here = (try? catalog.holdings(unique.map(\.hash))) ?? (held: [], partial: [])
        for b in unique {
            if (here.held.contains(b.hash) && !isDamaged(b.hash)) || fetched.holds(b.hash) { continue }
            if here.partial.contains(b.hash) { prefetch(b.hash, length: b.length, knownNotHeld: true); continue }
            wanted.append(b)
        }
        let taken = state.withLock { s -> [(hash: SHA256Digest, length: Int)] in
            guard s.remote != nil else { return [] }
            return wanted.filter { s.prefetching.insert($0.hash).inserted }
        }
        var group: [(hash: SHA256Digest, length: Int)] = []
        var bytes = 0
        func flush() {
            guard !group.isEmpty else { return }
            let batch = group
            group = []; bytes = 0
            prefetchWorkers.run { [self] in
                defer { state.withLock { s in for b in batch { s.prefetching.remove(b.hash) } } }
                prefetchTogether(batch)
            }
        }
        for b in taken {
            if bytes + b.length > Self.prefetchGroupBytes || group.count == Self.prefetchGroupBlocks { flush() }
            group.append(b)
            bytes += b.length
        }
        flush()
    }

    /// A group's bytes and blocks at most: one exchange each, a few of them in flight.
    static let prefetchGroupBytes = 8 << 20
    static let prefetchGroupBlocks = 512
    /// Small blocks of a group recorded in the catalog together, at most, and the longest
    /// the first of them waits for the others (nanoseconds).
    static let adoptionBatch = 64
    static let adoptionWait: UInt64 = 5_000_000

    /// One group: the blocks no one else is fetching are claimed (never waited for: two
    /// groups claiming in different orders must not wait on each other), fetched in one
    /// exchange, each checked against its digest and kept; the claims are released as
    /// each is kept, and all of them whatever happens.
    private func prefetchTogether(_ group: [(hash: SHA256Digest, length: Int)]) {
        guard let remote else { return }
        var mine: [SHA256Digest: Int] = [:]
        busy.lock()
        for b in group where !busyHashes.contains(b.hash) {
            busyHashes.insert(b.hash)
            mine[b.hash] = b.length
        }
        busy.unlock()
        var claimed = Set(mine.keys)
        defer { for hash in claimed { release(hash) } }
        for hash in mine.keys { noteUse(hash) }
        if let held = try? catalog.holdings(Array(mine.keys)).held {
            for hash in held where !isDamaged(hash) { mine[hash] = nil }
        }
        if mine.isEmpty { return }
        let order = group.map(\.hash).filter { mine[$0] != nil }
        // Small blocks go into the pack as they come and are recorded a batch at a time:
        // one lock and one transaction for a burst of them. A batch is recorded when it is
        // full, when its first block has waited `adoptionWait` (a reader may be waiting
        // for it: over a slow link every block goes on its own), and at the end.
        var arrived: [(arrival: PackedArrival, wasDamaged: Bool)] = []
        var firstArrival: UInt64 = 0
        func adoptArrived() {
            guard !arrived.isEmpty else { return }
            let batch = arrived
            arrived = []
            do {
                try catalog.adoptFetchedPacked(batch.map(\.arrival))
                state.withLock { $0.stats.blocksAdopted += batch.count }
                for a in batch { kept(a.arrival.digest, wasDamaged: a.wasDamaged) }
            } catch {
                DriveLog.error("\(batch.count) blocks were fetched but could not be kept in the store (\(error)): they are fetched again when read")
            }
            for a in batch {
                release(a.arrival.digest)
                claimed.remove(a.arrival.digest)
            }
        }
        defer { adoptArrived() }
        _ = try? remoteCall(order[0]) { () throws(RemoteFailure) in
            try remote.wholeBlocks(order, interactive: false) { hash, bytes in
                guard let length = mine[hash] else { return }
                state.withLock { $0.stats.bytesFetched += Int64(bytes.count) }
                let hasher = SHA256Hasher()
                hasher.update(bytes)
                guard bytes.count == length, hasher.finish() == hash else {
                    // Left to a reader, which fetches it the one-block way (and says so if it fails).
                    state.withLock { $0.stats.digestMismatches += 1 }
                    return
                }
                do {
                    let wasDamaged = isDamaged(hash)
                    if length <= InlineBlocks.limit {
                        // Into the pack: no inode per block (PackFile.swift).
                        let offset = try catalog.pack.append(bytes)
                        if arrived.isEmpty { firstArrival = DispatchTime.now().uptimeNanoseconds }
                        arrived.append((PackedArrival(digest: hash, range: PackRange(offset: offset, length: length)), wasDamaged))
                        if arrived.count >= Self.adoptionBatch
                            || DispatchTime.now().uptimeNanoseconds - firstArrival >= Self.adoptionWait { adoptArrived() }
                        return
                    } else {
                        let (fd, path) = try blobs.makeStagingFile()
                        do {
                            defer { FileIO.close(fd) }
                            try FileIO.pwrite(fd, bytes, at: 0)
                        } catch {
                            _ = unlink(path)
                            throw error
                        }
                        try keep(path, hash, length: length, wasDamaged: wasDamaged)
                    }
                } catch {
                    DriveLog.error("block \(hash.hex) was fetched but could not be kept in the store (\(error)): it is fetched again when read")
                }
                release(hash)
                claimed.remove(hash)
            }
        }
    }

    /// A prefetch: as `descriptor` for a whole block, except that the block's write to
    /// the store may go to `storeWriters`, which then lets the block go (`release`) once
    /// it is adopted. Until then a reader finds it in `fetched` or waits for it.
    private func prefetchWhole(_ hash: SHA256Digest, length: Int) {
        noteUse(hash)
        if let fd = openResident(hash) { FileIO.close(fd); return }
        guard let remote else { return }
        claim(hash)
        var handedOff = false
        defer { if !handedOff { release(hash) } }
        if let fd = openResident(hash) { FileIO.close(fd); return }
        if (try? catalog.verifiedChunks(hash)) != 0 {
            // Partly here (as in `descriptor`): the rest of its chunks.
            _ = try? fetchChunks(hash, length: length, range: 0..<length, interactive: false, remote)
            return
        }
        handedOff = (try? fetchWhole(hash, length: length, interactive: false, keepInMemory: true, remote,
                                     storeOn: storeWriters.backlog < Self.storeBacklog ? storeWriters : nil)) ?? false
    }

    /// Whether this failure (or success: false) to confirm originals with the server
    /// is the first of an outage: one log line per outage, not one per pass.
    func isFirstConfirmationFailure(_ failed: Bool) -> Bool {
        state.withLock { s in
            defer { s.confirmationOutageLogged = failed }
            return failed && !s.confirmationOutageLogged
        }
    }

    // MARK: Damage

    func isDamaged(_ hash: SHA256Digest) -> Bool { state.withLock { $0.damaged.contains(hash) } }
    func setDamaged(_ hashes: Set<SHA256Digest>) { state.withLock { $0.damaged = hashes } }
    func clearDamaged(_ hashes: [SHA256Digest]) { state.withLock { s in for h in hashes { s.damaged.remove(h) } } }

    // MARK: Resolving a read

    /// A descriptor from which `range` of block `hash` reads verified bytes: the stored
    /// block, or its partial file with every chunk covering `range` verified. `whole`
    /// fetches the whole block in one request (a sequential reader, a copy before a write);
    /// `keepInMemory` also keeps its checked bytes in `fetched` for the reader.
    func descriptor(_ hash: SHA256Digest, length: Int, range: Range<Int>, interactive: Bool, whole: Bool,
                    keepInMemory: Bool = false) throws -> SharedDescriptor {
        noteUse(hash)
        if let fd = openResident(hash) { return SharedDescriptor(fd) }
        guard let remote else {
            DriveLog.error("block \(hash.hex) is not held here and no server is configured: the read fails with EIO")
            throw Errno.ioError
        }
        return try exclusively(hash) {
            if let fd = openResident(hash) { return SharedDescriptor(fd) }
            // A block some of whose chunks are here already (a reader's window reached
            // into it) gets only the rest: a whole fetch would bring those again.
            let partlyHere = whole ? try catalog.verifiedChunks(hash) != 0 : false
            if isDamaged(hash) || (whole && !partlyHere) {
                try fetchWhole(hash, length: length, interactive: interactive, keepInMemory: keepInMemory && whole, remote)
                guard let fd = openResident(hash) else { throw Errno.ioError }
                return SharedDescriptor(fd)
            }
            return try fetchChunks(hash, length: length, range: whole ? 0..<length : range, interactive: interactive, remote)
        }
    }

    /// The stored block's descriptor, when it is here and not damaged.
    private func openResident(_ hash: SHA256Digest) -> Int32? { (try? openHeld(hash)) ?? nil }

    /// The descriptor of a block held here and sound: a small block kept in the pack
    /// (a memory file with its bytes; asked first, so a damaged file of the same bytes is
    /// never served), else its block file; nil when it is not here or damaged.
    func openHeld(_ hash: SHA256Digest) throws -> Int32? {
        if let bytes = try catalog.packedBlock(hash) { return try BlobStore.memoryFile(holding: bytes) }
        return try openHeldFile(hash)
    }

    /// The same for a block known not to be packed: its file only.
    func openHeldFile(_ hash: SHA256Digest) throws -> Int32? {
        if isDamaged(hash) { return nil }
        do { return try blobs.open(hash) } catch Errno.noSuchFileOrDirectory { return nil }
    }

    func exclusively<T>(_ hash: SHA256Digest, _ body: () throws -> T) rethrows -> T {
        claim(hash)
        defer { release(hash) }
        return try body()
    }

    /// Makes `hash` this thread's to fetch or store, waiting while another holds it.
    private func claim(_ hash: SHA256Digest) {
        busy.lock()
        while busyHashes.contains(hash) { busy.wait() }
        busyHashes.insert(hash)
        busy.unlock()
    }

    private func release(_ hash: SHA256Digest) {
        busy.lock()
        busyHashes.remove(hash)
        busy.broadcast()
        busy.unlock()
    }

    /// One whole block in one request, streamed into a staging file and hashed as it
    /// arrives, checked against its SHA-256 (fetched once more when wrong), then adopted.
    /// `keepInMemory`: the bytes are also gathered in memory and, once checked, published
    /// in `fetched` (before the adoption: a waiting reader needs only the check).
    /// `storeOn`: a block kept in memory is written and adopted there, and true returned;
    /// the caller's claim on `hash` is then released there too.
    @discardableResult
    private func fetchWhole(_ hash: SHA256Digest, length: Int, interactive: Bool, keepInMemory: Bool, _ remote: RemoteContent,
                            storeOn writers: BlockingWorkers? = nil) throws -> Bool {
        let wasDamaged = isDamaged(hash)
        let memory = keepInMemory ? fetched.makeBlock(capacity: length) : nil
        let (fd, path) = try blobs.makeStagingFile()
        let direct = FileIO.openDirectForWriting(path)
        let closeStaging: @Sendable () -> Void = {
            FileIO.close(fd)
            if let direct { FileIO.close(direct) }
        }
        var handedOff = false
        do {
            defer { if !handedOff { closeStaging() } }
            var verified = false
            for attempt in 1...2 where !verified {
                // Only a retry truncates: ext4 starts writeback at the close of a file
                // truncated to zero (auto_da_alloc), measured at 7% of a cold read's CPU.
                if attempt > 1 && memory == nil { try FileIO.ftruncate(fd, 0) }
                memory?.reset()
                let hasher = SHA256Hasher()
                let n = try remoteCall(hash) { () throws(RemoteFailure) -> Int in
                    // Into memory only, when kept there: the disk is written once the
                    // block checked (an O_DIRECT write waits for the disk, and a reader
                    // waiting for this block need not).
                    try remote.wholeBlock(hash, into: memory == nil ? fd : nil, direct: memory == nil ? direct : nil,
                                          interactive: interactive) { piece in
                        hasher.update(piece)
                        memory?.append(piece)
                    }
                }
                state.withLock { $0.stats.bytesFetched += Int64(n) }
                verified = n == length && hasher.finish() == hash
                if !verified {
                    state.withLock { $0.stats.digestMismatches += 1 }
                    if attempt == 2 {
                        DriveLog.error("block \(hash.hex) from the server failed its digest twice (corrupt in transit or in the server's store): the read fails with EIO")
                    }
                }
            }
            if !verified { throw Errno.ioError }
            if let memory {
                fetched.publish(hash, memory)
                busy.lock()
                busy.broadcast()   // readers in `awaitFetched` go on now
                busy.unlock()
                if let writers {
                    handedOff = true
                    writers.run { [self] in
                        defer {
                            closeStaging()
                            release(hash)
                        }
                        do {
                            beforeStoreWrite?()
                            try Self.write(memory.bytes(0..<length), to: fd, direct: direct)
                            try keep(path, hash, length: length, wasDamaged: wasDamaged)
                        } catch {
                            // Only the cache lost it: a later read fetches the block again.
                            _ = unlink(path)
                            DriveLog.error("block \(hash.hex) was fetched but could not be kept in the store (\(error)): it is fetched again when read again")
                        }
                    }
                    return true
                }
                try Self.write(memory.bytes(0..<length), to: fd, direct: direct)
            }
        } catch {
            _ = unlink(path)
            throw error
        }
        try keep(path, hash, length: length, wasDamaged: wasDamaged)
        return false
    }

    /// A fetched block's staging file, checked and written, becomes the stored block.
    private func keep(_ path: String, _ hash: SHA256Digest, length: Int, wasDamaged: Bool) throws {
        try adopt(path, hash, length: length)
        kept(hash, wasDamaged: wasDamaged)
    }

    /// After a fetched block was adopted (as a file or packed): its partial file goes, and it counts.
    private func kept(_ hash: SHA256Digest, wasDamaged: Bool) {
        clearDamaged([hash])
        _ = unlink(partialPath(hash))
        state.withLock { s in
            s.stats.blocksFetched += 1
            if wasDamaged { s.stats.blocksHealed += 1 }
        }
        if wasDamaged { DriveLog.info("block \(hash.hex) was fetched again from the server: its files read correctly again") }
    }

    /// Writes a block from memory: through `direct` (O_DIRECT, past the page cache) all
    /// but a tail shorter than a disk block, which goes through `fd`. The memory is
    /// aligned (FetchedBlock), so nothing is copied on the way.
    private static func write(_ bytes: UnsafeRawBufferPointer, to fd: Int32, direct: Int32?) throws {
        let aligned = direct == nil ? 0 : bytes.count & ~(FileIO.directAlignment - 1)
        if let direct, aligned > 0 { try FileIO.pwrite(direct, UnsafeRawBufferPointer(rebasing: bytes[0..<aligned]), at: 0) }
        if aligned < bytes.count { try FileIO.pwrite(fd, UnsafeRawBufferPointer(rebasing: bytes[aligned...]), at: Int64(aligned)) }
    }

    /// Block `hash`'s bytes for `range` from memory, waiting while a fetch of it is in
    /// flight (it publishes them as soon as they check, before it writes the disk);
    /// nil when no fetch kept them.
    func awaitFetched(_ hash: SHA256Digest, _ range: Range<Int>) -> FetchedBlock? {
        busy.lock()
        defer { busy.unlock() }
        while busyHashes.contains(hash) {
            if let m = fetched.take(hash, range) { return m }
            busy.wait()
        }
        return fetched.take(hash, range)
    }

    /// The chunks covering `range` that are not verified yet, each checked against its
    /// chunk digest before it is written and recorded; adopts the block when complete.
    /// Chunks missing side by side come in one ranged request (a reader's window is up
    /// to 2 MiB of them); one that fails its digest is fetched alone once more.
    private func fetchChunks(_ hash: SHA256Digest, length: Int, range: Range<Int>, interactive: Bool,
                             _ remote: RemoteContent) throws -> SharedDescriptor {
        let digests = try chunkList(hash, length: length, remote)
        let chunkCount = digests.count
        var verified = try catalog.verifiedChunks(hash)
        let path = partialPath(hash)
        let fd = try FileIO.open(path, O_RDWR | O_CREAT, 0o600)
        let shared = SharedDescriptor(fd)
        if verified == 0 { try FileIO.ftruncate(fd, Int64(length)) }
        let isHere = { (index: Int) in verified & (1 << UInt64(index)) != 0 }
        let last = range.isEmpty ? -1 : (range.upperBound - 1) / Blocks.chunkSize
        var index = range.lowerBound / Blocks.chunkSize
        while index <= last {
            if isHere(index) { index += 1; continue }
            var runEnd = index
            while runEnd < last && !isHere(runEnd + 1) { runEnd += 1 }
            let start = index * Blocks.chunkSize
            let end = min(length, (runEnd + 1) * Blocks.chunkSize)
            let bytes = try remoteCall(hash) { () throws(RemoteFailure) -> [UInt8] in
                try remote.blockBytes(hash, offset: start, length: end - start, interactive: interactive)
            }
            state.withLock { $0.stats.bytesFetched += Int64(bytes.count) }
            var written: UInt64 = 0
            do {
                for chunk in index...runEnd {
                    let from = chunk * Blocks.chunkSize
                    let to = min(length, from + Blocks.chunkSize)
                    let checked: Bool = bytes.count == end - start && bytes.withUnsafeBytes { raw in
                        Self.digest(UnsafeRawBufferPointer(rebasing: raw[(from - start)..<(to - start)])) == digests[chunk]
                    }
                    if checked {
                        try bytes.withUnsafeBytes { raw in
                            try FileIO.pwrite(fd, UnsafeRawBufferPointer(rebasing: raw[(from - start)..<(to - start)]), at: Int64(from))
                        }
                    } else {
                        state.withLock { $0.stats.digestMismatches += 1 }
                        let again = try fetchVerified(hash, what: "chunk \(chunk) of block", expected: digests[chunk],
                                                      length: to - from, attempts: 1) { () throws(RemoteFailure) -> [UInt8] in
                            try remote.blockBytes(hash, offset: from, length: to - from, interactive: interactive)
                        }
                        try again.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: Int64(from)) }
                    }
                    written |= 1 << UInt64(chunk)
                }
            } catch {
                // The chunks before the bad one were written and are good: kept.
                if written != 0 { try? catalog.recordVerifiedChunks(hash, length: length, mask: written) }
                throw error
            }
            try catalog.recordVerifiedChunks(hash, length: length, mask: written)
            verified |= written
            state.withLock { $0.stats.chunksFetched += written.nonzeroBitCount }
            index = runEnd + 1
        }
        let all: UInt64 = chunkCount == 64 ? .max : (1 << UInt64(chunkCount)) - 1
        guard verified & all == all else { return shared }
        // Every chunk is here: the whole block must still hash to its name (the chunk
        // list came from the server; a wrong list cannot make a wrong block resident).
        guard (try? BlobStore.hash(fd: fd, upTo: Int64(length))) == hash else {
            DriveLog.error("block \(hash.hex) assembled from verified chunks does not hash to its name (wrong chunk list from the server?): fetched again as a whole on the next read")
            _ = unlink(path)
            try catalog.forgetPartial(hash, chunkDigestsToo: true)
            throw Errno.ioError
        }
        try adopt(path, hash, length: length)
        guard let stored = openResident(hash) else { throw Errno.ioError }
        return SharedDescriptor(stored)
    }

    private func adopt(_ path: String, _ hash: SHA256Digest, length: Int) throws {
        _ = try catalog.adoptFetchedBlock(from: path, hash, length: length)
        clearDamaged([hash])
        state.withLock { $0.stats.blocksAdopted += 1 }
    }

    /// The block's chunk digests: from the catalog, else from the server (kept).
    private func chunkList(_ hash: SHA256Digest, length: Int, _ remote: RemoteContent) throws -> [SHA256Digest] {
        let expected = (length + Blocks.chunkSize - 1) / Blocks.chunkSize
        if let kept = try catalog.chunkDigests(hash), kept.count == expected { return kept }
        let fetched = try remoteCall(hash) { () throws(RemoteFailure) -> [SHA256Digest] in try remote.chunkDigests(hash) }
        guard fetched.count == expected else {
            DriveLog.error("the server listed \(fetched.count) chunks for block \(hash.hex) of \(length) bytes, not \(expected): the read fails with EIO")
            throw Errno.ioError
        }
        try catalog.saveChunkDigests(hash, fetched)
        return fetched
    }

    /// Fetches bytes and checks their SHA-256 against `expected`; a mismatch is fetched
    /// once more, then the read fails. A wrong byte is never written anywhere served.
    /// `attempts`: 1 when the first attempt was made by the caller.
    private func fetchVerified(_ hash: SHA256Digest, what: String, expected: SHA256Digest, length: Int, attempts: Int = 2,
                               _ fetch: () throws(RemoteFailure) -> [UInt8]) throws -> [UInt8] {
        for attempt in 1...attempts {
            let bytes = try remoteCall(hash, fetch)
            state.withLock { $0.stats.bytesFetched += Int64(bytes.count) }
            if bytes.count == length && Self.digest(bytes) == expected { return bytes }
            state.withLock { $0.stats.digestMismatches += 1 }
            if attempt == attempts {
                DriveLog.error("\(what) \(hash.hex) from the server failed its digest twice (corrupt in transit or in the server's store): the read fails with EIO")
            }
        }
        throw Errno.ioError
    }

    /// Runs a remote call, mapping failures to EIO with one log line per outage.
    private func remoteCall<T>(_ hash: SHA256Digest, _ call: () throws(RemoteFailure) -> T) throws -> T {
        do {
            let result = try call()
            let recovered = state.withLock { s -> Bool in
                defer { s.outageLogged = false }
                return s.outageLogged
            }
            if recovered { DriveLog.info("the workspace server answers again: reads of blocks not held here work again") }
            return result
        } catch {
            switch error {
            case .unavailable(let why):
                let first = state.withLock { s -> Bool in
                    defer { s.outageLogged = true }
                    return !s.outageLogged
                }
                if first { DriveLog.error("the workspace server is unreachable (\(why)): reads of blocks not held here fail with EIO until it answers") }
            case .missing(let why):
                DriveLog.error("the server does not hold block \(hash.hex) (\(why)): the read fails with EIO")
            case .refused(let why):
                DriveLog.error("block \(hash.hex) could not be fetched from the server (\(why)): the read fails with EIO")
            case .held:
                break   // prefetch held by policy: nothing to report
            }
            throw Errno.ioError
        }
    }

    static func digest(_ bytes: [UInt8]) -> SHA256Digest {
        bytes.withUnsafeBytes { digest($0) }
    }

    static func digest(_ bytes: UnsafeRawBufferPointer) -> SHA256Digest {
        let h = SHA256Hasher()
        h.update(bytes)
        return h.finish()
    }

    func partialPath(_ hash: SHA256Digest) -> String { partialRoot + "/" + hash.hex }

    // MARK: Recovery and use

    /// At mount: partial files the catalog does not record are removed; after an unclean
    /// stop every partial block is forgotten (a record may have reached the disk before
    /// its chunk's bytes did).
    func recover(afterUncleanStop unclean: Bool) throws {
        if unclean { _ = try catalog.forgetAllPartials() }
        for name in (try? FileIO.listDirectory(partialRoot)) ?? [] {
            guard let d = SHA256Digest(hex: name) else { _ = unlink(partialRoot + "/" + name); continue }
            if try catalog.verifiedChunks(d) == 0 { _ = unlink(partialRoot + "/" + name) }
        }
    }

    func noteUse(_ hash: SHA256Digest) {
        let now = nowNanoseconds()
        state.withLock { $0.uses[hash] = now }
    }

    /// Writes the batched use times into the catalog (before an eviction pass, at stop).
    func flushUses() {
        let uses = state.withLock { s -> [SHA256Digest: Int64] in
            defer { s.uses.removeAll(keepingCapacity: true) }
            return s.uses
        }
        try? catalog.recordUse(uses)
    }
}
