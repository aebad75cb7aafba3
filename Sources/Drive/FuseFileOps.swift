import CFuse3
import CFuseIO
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// File content: create, open, read, write, flush, release, fsync.
enum FuseFileOps {
    static func install(_ ops: inout fuse_lowlevel_ops) {
        ops.create = { req, parent, name, mode, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                let who = FuseDirectoryOps.caller(req)
                let (a, fh) = try ctx.fs.createAndOpen(parent: UInt64(parent), name: copyName(name), mode: mode, uid: who.uid, gid: who.gid)
                vd_fi_set_fh(fi, fh)
                if writesPastThePageCache(vd_fi_flags(fi)) { vd_fi_set_direct_io(fi, 1) }
                var e = ctx.entryParam(a)
                if fuse_reply_create(req, &e, fi) != 0 {
                    ctx.fs.release(fh)
                    ctx.fs.forget(a.ino, count: 1)
                }
            }
        }
        ops.open = { req, ino, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                let flags = vd_fi_flags(fi)
                let writable = flags & O_ACCMODE != O_RDONLY
                let fh = try ctx.fs.open(UInt64(ino), writable: writable, truncate: flags & O_TRUNC != 0, callerUid: fuse_req_ctx(req)!.pointee.uid)
                vd_fi_set_fh(fi, fh)
                // Generated files change size between stat and read: bypass the page cache.
                // A Backups/ file is a fixed content per open (a new version is seen at the
                // next open, which drops cached pages): cached, mmap-able, read ahead, once
                // its blocks are held here (`readsPastThePageCache`).
                if ctx.fs.isGeneratedHandle(fh) || writesPastThePageCache(flags)
                    || readsPastThePageCache(ctx, fh, writable: writable) {
                    vd_fi_set_direct_io(fi, 1)
                }
                // keep_cache stays off: after a failed commit (ENOSPC) the kernel's pages
                // hold content that never became the file's, and a new open must not see it.
                // A handle that cannot write has nothing to commit at close: the kernel
                // skips its FLUSH, one round trip of the four or five a small file's read
                // costs (open, read, flush, release).
                if !writable { vd_fi_set_noflush(fi, 1) }
                if fuse_reply_open(req, fi) != 0 { ctx.fs.release(fh) }
            }
        }
        ops.read = { req, _, size, offset, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                var buffer: UnsafeMutableRawBufferPointer?
                defer { buffer?.deallocate() }
                let source = try ctx.fs.readSource(vd_fi_fh(fi), count: size, at: Int64(offset)) {
                    let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 4096)
                    buffer = b
                    return UnsafeMutableRawBufferPointer(rebasing: b[0..<size])
                }
                switch source {
                case .bytes(let n):
                    fuse_reply_buf(req, buffer?.baseAddress?.assumingMemoryBound(to: CChar.self), n)
                case .pieces(let pieces):
                    replyPieces(req, pieces)
                }
            }
        }
        ops.write = { req, _, buf, size, offset, fi in
            let ctx = FuseContext.of(req)
            var hashing: [PendingHash] = []
            replying(req) {
                guard let fi, let buf else { throw Errno.invalidArgument }
                let n: Int
                // The bytes are in this thread's page-aligned buffer (CFuseIO), ready for O_DIRECT.
                let bytes = UnsafeRawBufferPointer(start: vd_fuse_write_payload(buf), count: size)
                (n, hashing) = try ctx.fs.writeHashingLater(vd_fi_fh(fi), bytes, at: Int64(offset),
                                                            callerUid: fuse_req_ctx(req)!.pointee.uid)
                fuse_reply_write(req, n)
            }
            // After the reply and before libfuse reuses `buf`: the writer's next request
            // arrives at another worker while this one hashes.
            for h in hashing { h.run() }
        }
        ops.flush = { req, _, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                try ctx.fs.flush(vd_fi_fh(fi))
                fuse_reply_err(req, 0)
            }
        }
        ops.release = { req, _, fi in
            let ctx = FuseContext.of(req)
            if let fi { ctx.fs.release(vd_fi_fh(fi)) }
            fuse_reply_err(req, 0)
        }
        ops.fsync = { req, _, _, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                try ctx.fs.fsync(vd_fi_fh(fi))
                fuse_reply_err(req, 0)
            }
        }
    }
}

/// A handle opened write-only (cp, tar, rsync, a camera importer) writes past the
/// kernel's page cache (direct I/O): the kernel hands the writer's own buffer to the
/// request instead of first copying it into fresh page-cache pages of the FUSE file,
/// pages nobody reads (the staging file holds the bytes, and keep_cache is off, so the
/// next open drops them anyway). Measured: half the system CPU of `cp -r` of 1,000
/// files of 1 MiB, and 1.3x faster (Docs/benchmarks.md, "Write-only handles past the
/// page cache"). Such a handle cannot read or map the file, so nothing else changes for
/// it; a reader holding cached pages of the file still sees the new bytes (the kernel
/// drops the range a direct write covered, and the changed mtime drops the rest:
/// `MountBehaviourTests.aWriteOnlyHandlesBytesReachAReaderWithCachedPages`). Handles
/// that can read keep the page cache (reads, mmap).
private func writesPastThePageCache(_ flags: Int32) -> Bool { flags & O_ACCMODE == O_WRONLY }

/// A read-only handle on content not all held here (an online-only photo, a `Backups/`
/// file not read before) reads past the page cache too: every byte it reads was fetched
/// and verified by the drive, which keeps the block in its own cache; the kernel's copy
/// would be a second one, written into fresh pages and read once. Measured on a cold
/// sequential read of an online-only 1 GiB file: the mount's CPU per GiB from 1.82 to
/// 1.1-1.3 s, the reader's from 0.27 to 0.05 s, 682 to 810-870 MB/s (Docs/benchmarks.md).
/// Only where the kernel took FUSE_DIRECT_IO_ALLOW_MMAP, so that an image viewer's
/// shared mmap still works; elsewhere such a file is cached as before.
private func readsPastThePageCache(_ ctx: FuseContext, _ fh: UInt64, writable: Bool) -> Bool {
    !writable && ctx.directIOKeepsMmap && ctx.fs.readsFromTheServer(fh)
}

/// Replies to a read with stored blocks (spliced from their files), blocks just fetched
/// (from memory) and zeros for holes.
private func replyPieces(_ req: fuse_req_t?, _ pieces: [DriveFileSystem.ReadPiece]) {
    var fds: [Int32] = [], positions: [off_t] = [], lengths: [Int] = []
    var mems: [UnsafeRawPointer?] = []
    var held: [AnyObject] = []
    for piece in pieces {
        switch piece {
        case .zeros(let n):
            fds.append(-1); positions.append(0); lengths.append(n); mems.append(nil)
        case .block(let d, let offset, let length):
            held.append(d)
            fds.append(d.fd); positions.append(off_t(offset)); lengths.append(length); mems.append(nil)
        case .memory(let m, let offset, let length):
            held.append(m)
            fds.append(-1); positions.append(0); lengths.append(length)
            mems.append(m.bytes(offset..<(offset + length)).baseAddress)
        }
    }
    if pieces.isEmpty {
        fuse_reply_buf(req, nil, 0)
        return
    }
    // The descriptors and memory stay valid until the reply is sent (they are held here).
    withExtendedLifetime(held) {
        _ = vd_fuse_reply_pieces(req, Int32(fds.count), fds, positions, lengths, mems, ZeroRegion.shared.base, ZeroRegion.shared.length)
    }
}

/// One read-only mapping of zeros for holes in read replies: anonymous pages that are
/// only read map the kernel's zero page, so this costs no memory.
/// `@unchecked Sendable`: the mapping is immutable after init.
final class ZeroRegion: @unchecked Sendable {
    static let shared = ZeroRegion(length: 4 << 20)
    let base: UnsafeRawPointer
    let length: Int
    init(length: Int) {
        let p = mmap(nil, length, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        precondition(p != MAP_FAILED && p != nil, "mmap of \(length) zero bytes failed")
        base = UnsafeRawPointer(p!)
        self.length = length
    }
}
