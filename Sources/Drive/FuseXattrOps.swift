import CFuse3
import Storage

/// Extended attributes: setxattr, getxattr, listxattr, removexattr.
/// A `size` of 0 asks for the length; a buffer too small gets ERANGE.
enum FuseXattrOps {
    static let xattrCreate: Int32 = 1    // XATTR_CREATE
    static let xattrReplace: Int32 = 2   // XATTR_REPLACE

    static func install(_ ops: inout fuse_lowlevel_ops) {
        ops.setxattr = { req, ino, name, value, size, flags in
            let ctx = FuseContext.of(req)
            replying(req) {
                let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
                try ctx.fs.setxattr(UInt64(ino), name: String(cString: name!), value: bytes,
                                    create: flags & FuseXattrOps.xattrCreate != 0, replace: flags & FuseXattrOps.xattrReplace != 0)
                fuse_reply_err(req, 0)
            }
        }
        ops.getxattr = { req, ino, name, size in
            let ctx = FuseContext.of(req)
            replying(req) {
                let value = try ctx.fs.getxattr(UInt64(ino), name: String(cString: name!))
                FuseXattrOps.reply(req, value, size)
            }
        }
        ops.listxattr = { req, ino, size in
            let ctx = FuseContext.of(req)
            replying(req) {
                var list: [UInt8] = []
                for name in try ctx.fs.listxattr(UInt64(ino)) { list += Array(name.utf8) + [0] }
                FuseXattrOps.reply(req, list, size)
            }
        }
        ops.removexattr = { req, ino, name in
            let ctx = FuseContext.of(req)
            replying(req) {
                try ctx.fs.removexattr(UInt64(ino), name: String(cString: name!))
                fuse_reply_err(req, 0)
            }
        }
    }

    static func reply(_ req: fuse_req_t?, _ value: [UInt8], _ size: Int) {
        if size == 0 {
            fuse_reply_xattr(req, value.count)
        } else if value.count > size {
            fuse_reply_err(req, ERANGE)
        } else {
            _ = value.withUnsafeBytes { fuse_reply_buf(req, $0.baseAddress?.assumingMemoryBound(to: CChar.self), value.count) }
        }
    }
}
