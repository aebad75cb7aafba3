import CFuse3
import Storage

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
                let fh = try ctx.fs.open(UInt64(ino), writable: writable, truncate: flags & O_TRUNC != 0)
                vd_fi_set_fh(fi, fh)
                // Generated files change size between stat and read: bypass the page cache.
                if VirtualInodes.contains(UInt64(ino)) { vd_fi_set_direct_io(fi, 1) }
                // keep_cache stays off: after a failed commit (ENOSPC) the kernel's pages
                // hold content that never became the file's, and a new open must not see it.
                if fuse_reply_open(req, fi) != 0 { ctx.fs.release(fh) }
            }
        }
        ops.read = { req, _, size, offset, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi else { throw Errno.invalidArgument }
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(size, 1), alignment: 4096)
                defer { buffer.deallocate() }
                switch try ctx.fs.readSource(vd_fi_fh(fi), into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<size]), at: Int64(offset)) {
                case .bytes(let n):
                    fuse_reply_buf(req, buffer.baseAddress!.assumingMemoryBound(to: CChar.self), n)
                case .blob(let descriptor):
                    // The descriptor stays open until the reply is sent (it is held here).
                    withExtendedLifetime(descriptor) { _ = vd_fuse_reply_fd(req, descriptor.fd, size, off_t(offset)) }
                }
            }
        }
        ops.write = { req, _, buf, size, offset, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let fi, let buf else { throw Errno.invalidArgument }
                let n = try ctx.fs.write(vd_fi_fh(fi), UnsafeRawBufferPointer(start: buf, count: size), at: Int64(offset))
                fuse_reply_write(req, n)
            }
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
