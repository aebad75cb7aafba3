import Foundation
import CLinux

/// File operations a file manager, cp -a, rsync, tar or an editor performs, run
/// against a root folder. Each step appends what it observed (results, errno
/// names, sizes, link counts, listings) to a transcript; the same scenario on a
/// plain folder and on the mount must give the same transcript.
struct PosixScenario {
    let root: String
    var transcript: [String] = []

    init(root: String) { self.root = root }

    func p(_ rel: String) -> String { root + "/" + rel }

    mutating func note(_ line: String) { transcript.append(line) }

    mutating func result(_ label: String, _ rc: Int32) {
        note("\(label): " + (rc == 0 ? "ok" : errnoName(errno)))
    }

    func errnoName(_ e: Int32) -> String {
        switch e {
        case ENOENT: return "ENOENT"; case EEXIST: return "EEXIST"; case ENOTDIR: return "ENOTDIR"
        case EISDIR: return "EISDIR"; case ENOTEMPTY: return "ENOTEMPTY"; case ENAMETOOLONG: return "ENAMETOOLONG"
        case EINVAL: return "EINVAL"; case EXDEV: return "EXDEV"; case ENODATA: return "ENODATA"
        case ERANGE: return "ERANGE"; case EPERM: return "EPERM"; case EBADF: return "EBADF"
        default: return "errno \(e)"
        }
    }

    mutating func statNote(_ rel: String) {
        var st = stat()
        if lstat(p(rel), &st) != 0 { note("stat \(rel): \(errnoName(errno))"); return }
        let type: String
        switch st.st_mode & S_IFMT {
        case S_IFDIR: type = "dir"; case S_IFREG: type = "file"; case S_IFLNK: type = "link"; default: type = "other"
        }
        // Folder sizes differ between file systems by design; everything else must match.
        let size = type == "dir" ? "-" : String(st.st_size)
        note("stat \(rel): \(type) size=\(size) nlink=\(st.st_nlink) mode=\(String(st.st_mode & 0o7777, radix: 8)) uid=\(st.st_uid) gid=\(st.st_gid)")
    }

    mutating func content(_ rel: String) {
        if let d = FileManager.default.contents(atPath: p(rel)) {
            note("content \(rel): \(d.count) bytes, sum \(d.reduce(UInt64(0)) { $0 &* 31 &+ UInt64($1) })")
        } else {
            note("content \(rel): unreadable \(errnoName(errno))")
        }
    }

    mutating func listing(_ rel: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: p(rel)))?.sorted() ?? ["<error>"]
        note("ls \(rel): \(names.joined(separator: ","))")
    }

    mutating func write(_ rel: String, _ text: String, flags: Int32 = O_WRONLY | O_CREAT | O_TRUNC, at offset: Int64? = nil) {
        let fd = open(p(rel), flags, 0o644)
        if fd < 0 { note("open \(rel): \(errnoName(errno))"); return }
        let bytes = Array(text.utf8)
        let n = bytes.withUnsafeBytes { b in
            offset.map { pwrite(fd, b.baseAddress, b.count, off_t($0)) } ?? Glibc.write(fd, b.baseAddress, b.count)
        }
        note("write \(rel): \(n)")
        result("close \(rel)", close(fd))
    }

    mutating func run() {
        // Create, overwrite, append, random offsets, truncate.
        write("a.txt", "hello world")
        statNote("a.txt"); content("a.txt")
        write("a.txt", "bye")
        content("a.txt")
        write("a.txt", " and more", flags: O_WRONLY | O_APPEND)
        content("a.txt")
        write("a.txt", "XY", flags: O_WRONLY, at: 1)
        content("a.txt")
        write("a.txt", "far", flags: O_WRONLY, at: 100)
        statNote("a.txt"); content("a.txt")
        result("truncate a 5", truncate(p("a.txt"), 5)); content("a.txt")
        result("truncate a 50", truncate(p("a.txt"), 50)); content("a.txt")
        write("empty", "")
        statNote("empty"); content("empty")

        // Folders.
        result("mkdir d", mkdir(p("d"), 0o755))
        result("mkdir d again", mkdir(p("d"), 0o755))
        result("mkdir d/e", mkdir(p("d/e"), 0o750))
        result("mkdir d/f", mkdir(p("d/f"), 0o755))
        statNote("d")
        write("d/e/in.txt", "inside")
        result("rmdir d (not empty)", rmdir(p("d")))
        result("rmdir a.txt", rmdir(p("a.txt")))
        result("unlink d", unlink(p("d")))
        result("rmdir d/f", rmdir(p("d/f")))
        statNote("d")
        result("open missing", open(p("nope/x"), O_RDONLY) >= 0 ? 0 : -1)
        result("create under file", open(p("a.txt/x"), O_CREAT | O_WRONLY, 0o644) >= 0 ? 0 : -1)
        let long = String(repeating: "n", count: 256)
        result("create long name", open(p(long), O_CREAT | O_WRONLY, 0o644) >= 0 ? 0 : -1)
        let ok255 = String(repeating: "m", count: 255)
        write(ok255, "max")
        content(ok255)

        // Renames.
        write("r1", "one"); write("r2", "two")
        result("rename r1 -> d/e/r1", rename(p("r1"), p("d/e/r1")))
        result("rename r2 -> d/e/r1 (replace)", rename(p("r2"), p("d/e/r1")))
        content("d/e/r1"); statNote("r2")
        write("r3", "three")
        result("renameat2 NOREPLACE r3 -> d/e/r1", vd_renameat2(AT_FDCWD, p("r3"), AT_FDCWD, p("d/e/r1"), 1))
        content("d/e/r1")
        result("renameat2 EXCHANGE r3 <-> d/e/r1", vd_renameat2(AT_FDCWD, p("r3"), AT_FDCWD, p("d/e/r1"), 2))
        content("r3"); content("d/e/r1")
        result("rename d/e -> moved", rename(p("d/e"), p("moved")))
        statNote("d"); statNote("moved"); listing("moved")
        result("rename moved -> moved/in.txt/x", rename(p("moved"), p("moved/sub")))
        result("mkdir t", mkdir(p("t"), 0o755))
        result("rename dir onto empty dir", rename(p("moved"), p("t")))
        listing("t")
        result("rename file onto dir", rename(p("r3"), p("t")))
        result("rename dir onto file", rename(p("t"), p("r3")))

        // Unlink while open.
        write("open.txt", "still here")
        let fd = open(p("open.txt"), O_RDONLY)
        result("unlink open.txt", unlink(p("open.txt")))
        var buf = [UInt8](repeating: 0, count: 64)
        let n = read(fd, &buf, 64)
        note("read after unlink: \(String(decoding: buf[0..<max(n, 0)], as: UTF8.self))")
        close(fd)
        statNote("open.txt")

        // Hard links and symlinks.
        write("h1", "linked")
        result("link h1 h2", link(p("h1"), p("h2")))
        statNote("h1"); statNote("h2")
        write("h2", "changed via h2")
        content("h1")
        result("unlink h1", unlink(p("h1")))
        statNote("h2")
        result("link dir", link(p("t"), p("t2")))
        result("symlink", symlink("h2", p("s")))
        statNote("s")
        var target = [CChar](repeating: 0, count: 256)
        let tl = readlink(p("s"), &target, 255)
        note("readlink s: \(String(cString: Array(target[0..<max(tl, 0)]) + [0]))")
        content("s")

        // Attributes.
        result("chmod h2 600", chmod(p("h2"), 0o600)); statNote("h2")
        result("chown h2 1234:5678", chown(p("h2"), 1234, 5678)); statNote("h2")
        var times = [timespec(tv_sec: 978_307_200, tv_nsec: 123_456_789), timespec(tv_sec: 1_000_000_000, tv_nsec: 987_654_321)]
        result("utimensat h2", utimensat(AT_FDCWD, p("h2"), &times, 0))
        var st = stat(); lstat(p("h2"), &st)
        note("times h2: atime=\(st.st_atim.tv_sec).\(st.st_atim.tv_nsec) mtime=\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)")

        // Extended attributes.
        result("setxattr", vd_setxattr(p("h2"), "user.color", "blue", 4, 0))
        result("setxattr create again", vd_setxattr(p("h2"), "user.color", "red", 3, 1))
        result("setxattr replace missing", vd_setxattr(p("h2"), "user.none", "x", 1, 2))
        var vbuf = [CChar](repeating: 0, count: 16)
        let vn = vd_getxattr(p("h2"), "user.color", &vbuf, 16)
        note("getxattr: \(vn) \(String(cString: Array(vbuf[0..<max(vn, 0)]) + [0]))")
        note("getxattr size probe: \(vd_getxattr(p("h2"), "user.color", nil, 0))")
        let small = vd_getxattr(p("h2"), "user.color", &vbuf, 2)
        note("getxattr small buffer: \(small < 0 ? errnoName(errno) : String(small))")
        var lbuf = [CChar](repeating: 0, count: 256)
        let ln = vd_listxattr(p("h2"), &lbuf, 256)
        let names = String(decoding: lbuf[0..<max(ln, 0)].map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: "\0").filter { $0.hasPrefix("user.") && !$0.hasPrefix("user.vdrive.") }
        note("listxattr: \(names)")
        result("removexattr", vd_removexattr(p("h2"), "user.color"))
        result("removexattr again", vd_removexattr(p("h2"), "user.color"))
        result("getxattr missing", vd_getxattr(p("h2"), "user.color", &vbuf, 16) >= 0 ? 0 : -1)

        listing("")
    }
}
