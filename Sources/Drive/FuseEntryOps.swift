import CFuse3
import Storage

/// lookup, forget, getattr, setattr: names to inodes, and inode attributes.
enum FuseEntryOps {
    static func install(_ ops: inout fuse_lowlevel_ops) {
        ops.lookup = { req, parent, name in
            let ctx = FuseContext.of(req)
            let n = copyName(name)
            do {
                let a = try ctx.fs.lookup(parent: UInt64(parent), name: n)
                ctx.replyEntry(req, a)
            } catch Errno.noSuchFileOrDirectory where VirtualInodes.contains(UInt64(parent)) {
                // Not cached: a generated tree (Backups/) gains names the drive did not
                // create, and a cached absence would hide a new backup for entry_timeout.
                fuse_reply_err(req, ENOENT)
            } catch Errno.noSuchFileOrDirectory {
                // A negative entry: the kernel caches the absence for entry_timeout.
                var e = fuse_entry_param()
                e.ino = 0
                e.entry_timeout = ctx.entryTimeout
                fuse_reply_entry(req, &e)
            } catch {
                fuse_reply_err(req, errnoValue(for: error))
            }
        }
        ops.forget = { req, ino, nlookup in
            FuseContext.of(req).fs.forget(UInt64(ino), count: UInt64(nlookup))
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            let fs = FuseContext.of(req).fs
            if let forgets {
                for i in 0..<Int(count) { fs.forget(UInt64(forgets[i].ino), count: UInt64(forgets[i].nlookup)) }
            }
            fuse_reply_none(req)
        }
        ops.getattr = { req, ino, _ in
            let ctx = FuseContext.of(req)
            replying(req) { ctx.replyAttr(req, try ctx.fs.getattr(UInt64(ino))) }
        }
        ops.setattr = { req, ino, attr, toSet, fi in
            let ctx = FuseContext.of(req)
            replying(req) {
                guard let attr else { throw Errno.invalidArgument }
                let changes = FuseEntryOps.attributeChanges(attr.pointee, toSet)
                let fh: UInt64? = fi.map { vd_fi_fh($0) }
                ctx.replyAttr(req, try ctx.fs.setattr(UInt64(ino), changes, handle: fh, callerUid: fuse_req_ctx(req)!.pointee.uid))
            }
        }
    }

    static func attributeChanges(_ st: stat, _ toSet: Int32) -> AttributeChanges {
        var c = AttributeChanges()
        if toSet & FUSE_SET_ATTR_MODE != 0 { c.mode = st.st_mode }
        if toSet & FUSE_SET_ATTR_UID != 0 { c.uid = st.st_uid }
        if toSet & FUSE_SET_ATTR_GID != 0 { c.gid = st.st_gid }
        if toSet & FUSE_SET_ATTR_SIZE != 0 { c.size = Int64(st.st_size) }
        if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 { c.atime = nowNanoseconds() }
        else if toSet & FUSE_SET_ATTR_ATIME != 0 { c.atime = NodeAttributes.nanoseconds(st.st_atim) }
        if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 { c.mtime = nowNanoseconds() }
        else if toSet & FUSE_SET_ATTR_MTIME != 0 { c.mtime = NodeAttributes.nanoseconds(st.st_mtim) }
        return c
    }
}
