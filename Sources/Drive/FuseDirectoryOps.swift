import CFuse3
import Storage

/// Folders and names: mkdir, mknod, symlink, link, unlink, rmdir, rename, readlink,
/// opendir, readdir, readdirplus.
enum FuseDirectoryOps {
    static func caller(_ req: fuse_req_t?) -> (uid: UInt32, gid: UInt32) {
        let c = fuse_req_ctx(req)!.pointee
        return (c.uid, c.gid)
    }

    static func install(_ ops: inout fuse_lowlevel_ops) {
        ops.mkdir = { req, parent, name, mode in
            let ctx = FuseContext.of(req)
            replying(req) {
                let who = FuseDirectoryOps.caller(req)
                ctx.replyEntry(req, try ctx.fs.create(parent: UInt64(parent), name: copyName(name), mode: UInt32(S_IFDIR) | (mode & 0o7777), uid: who.uid, gid: who.gid))
            }
        }
        ops.mknod = { req, parent, name, mode, rdev in
            let ctx = FuseContext.of(req)
            replying(req) {
                let who = FuseDirectoryOps.caller(req)
                ctx.replyEntry(req, try ctx.fs.create(parent: UInt64(parent), name: copyName(name), mode: mode, uid: who.uid, gid: who.gid, rdev: UInt64(rdev)))
            }
        }
        ops.symlink = { req, target, parent, name in
            let ctx = FuseContext.of(req)
            replying(req) {
                let who = FuseDirectoryOps.caller(req)
                ctx.replyEntry(req, try ctx.fs.symlink(parent: UInt64(parent), name: copyName(name), target: copyName(target), uid: who.uid, gid: who.gid))
            }
        }
        ops.readlink = { req, ino in
            let ctx = FuseContext.of(req)
            replying(req) {
                var target = try ctx.fs.readlink(UInt64(ino))
                target.append(0)
                target.withUnsafeBufferPointer { p in
                    p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { _ = fuse_reply_readlink(req, $0) }
                }
            }
        }
        ops.link = { req, ino, newParent, newName in
            let ctx = FuseContext.of(req)
            replying(req) { ctx.replyEntry(req, try ctx.fs.link(UInt64(ino), newParent: UInt64(newParent), newName: copyName(newName))) }
        }
        ops.unlink = { req, parent, name in
            let ctx = FuseContext.of(req)
            replying(req) {
                try ctx.fs.unlink(parent: UInt64(parent), name: copyName(name))
                fuse_reply_err(req, 0)
            }
        }
        ops.rmdir = { req, parent, name in
            let ctx = FuseContext.of(req)
            replying(req) {
                try ctx.fs.rmdir(parent: UInt64(parent), name: copyName(name))
                fuse_reply_err(req, 0)
            }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            let ctx = FuseContext.of(req)
            replying(req) {
                try ctx.fs.rename(parent: UInt64(parent), name: copyName(name), newParent: UInt64(newParent), newName: copyName(newName), flags: UInt32(flags))
                fuse_reply_err(req, 0)
            }
        }
        ops.opendir = { req, ino, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                let a = try ctx.fs.getattr(UInt64(ino))
                guard a.isDirectory else { throw Errno.notDirectory }
                fuse_reply_open(req, fi)
            }
        }
        ops.releasedir = { req, _, _ in fuse_reply_err(req, 0) }
        ops.fsyncdir = { req, _, _, _ in
            let ctx = FuseContext.of(req)
            replying(req) {
                try ctx.fs.syncAll()
                fuse_reply_err(req, 0)
            }
        }
        ops.readdir = { req, ino, size, offset, _ in
            FuseDirectoryOps.replyDirectory(req, UInt64(ino), size, Int64(offset), plus: false)
        }
        ops.readdirplus = { req, ino, size, offset, _ in
            FuseDirectoryOps.replyDirectory(req, UInt64(ino), size, Int64(offset), plus: true)
        }
        ops.statfs = { req, _ in
            let ctx = FuseContext.of(req)
            replying(req) {
                var st = try ctx.fs.statfs()
                fuse_reply_statfs(req, &st)
            }
        }
    }

    /// Fills one reply buffer with entries after `offset`. Offsets are catalog entry ids,
    /// so a listing resumed after concurrent changes neither repeats nor skips a
    /// surviving entry. With `plus`, every entry but "." and ".." counts as a lookup.
    static func replyDirectory(_ req: fuse_req_t?, _ ino: UInt64, _ size: Int, _ offset: Int64, plus: Bool) {
        let ctx = FuseContext.of(req)
        replying(req) {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: size)
            defer { buffer.deallocate() }
            var used = 0
            var after = offset
            var full = false
            while !full {
                // About 24 bytes of header plus the name per entry: ask for a bufferful.
                let batch = try ctx.fs.readdir(ino, after: after, limit: max(16, size / 48))
                if batch.isEmpty { break }
                for entry in batch {
                    let isDot = entry.offset <= 2
                    let written: Int = entry.name.withUnsafeBufferPointer { raw in
                        var name = Array(raw)
                        name.append(0)
                        return name.withUnsafeBufferPointer { p in
                            p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { cname in
                                if plus {
                                    var e = isDot ? fuse_entry_param() : ctx.entryParam(ctx.fs.withLiveContent(entry.attributes))
                                    if isDot { e.attr = entry.attributes.statValue() }
                                    return fuse_add_direntry_plus(req, buffer + used, size - used, cname, &e, off_t(entry.offset))
                                } else {
                                    var st = entry.attributes.statValue()
                                    return fuse_add_direntry(req, buffer + used, size - used, cname, &st, off_t(entry.offset))
                                }
                            }
                        }
                    }
                    if written > size - used { full = true; break }
                    used += written
                    after = entry.offset
                    if plus && !isDot { ctx.fs.remember(entry.attributes.ino) }
                }
            }
            fuse_reply_buf(req, buffer, used)
        }
    }
}
