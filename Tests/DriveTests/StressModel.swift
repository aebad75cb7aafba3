import Foundation
import Crypto
import Storage

/// The seeded random-operation run of StressTests: one operation at a time, applied to
/// a plain folder and to the mount (same relative path under each root), each result
/// (success or errno) compared between the two, every read compared with an in-memory
/// model of every file (sparse: 64 KiB chunks, absent = zeros). Single-threaded; one
/// instance per thread in the concurrent test, each in its own subfolder.
struct StressParameters: Sendable {
    /// Operations in the single-writer run.
    var operations = 3000
    /// Operations per writer in the four-writer run.
    var threadOperations = 400
    /// The farthest offset a sparse write or a truncate up reaches, in bytes. 16 MiB still
    /// spans four 4 MiB blocks, so writes and truncates cross block edges. Not more by
    /// default only for time: a commit costs the blocks it touched, but the final
    /// comparisons read every file whole through both sides. Raise with
    /// VDRIVE_STRESS_SPARSE_MIB (1024: files up to 1 GiB, a run of about 5 minutes).
    var sparseLimit = 16 << 20
    var seed: UInt64

    static func fromEnvironment() -> StressParameters {
        let env = ProcessInfo.processInfo.environment
        var seed = UInt64.random(in: 1...UInt64(UInt32.max))
        if let s = env["VDRIVE_STRESS_SEED"], let n = UInt64(s) { seed = n }
        var p = StressParameters(seed: seed)
        if let s = env["VDRIVE_STRESS_OPS"], let n = Int(s), n > 0 { p.operations = n }
        if let s = env["VDRIVE_STRESS_THREAD_OPS"], let n = Int(s), n > 0 { p.threadOperations = n }
        if let s = env["VDRIVE_STRESS_SPARSE_MIB"], let n = Int(s), n >= 4 { p.sparseLimit = n << 20 }
        return p
    }
}

/// One file's expected bytes: a size and the chunks that were ever written.
struct ModelFile {
    static let chunk = 64 << 10
    var size = 0
    var chunks: [Int: [UInt8]] = [:]
    var mode: UInt32 = 0o644
    var nlink = 1

    mutating func write(_ bytes: ArraySlice<UInt8>, at offset: Int) {
        var done = 0
        while done < bytes.count {
            let at = offset + done
            let index = at / Self.chunk, inChunk = at % Self.chunk
            let n = min(Self.chunk - inChunk, bytes.count - done)
            var c = chunks[index] ?? [UInt8](repeating: 0, count: Self.chunk)
            let from = bytes.startIndex + done
            c.replaceSubrange(inChunk..<(inChunk + n), with: bytes[from..<(from + n)])
            chunks[index] = c
            done += n
        }
        size = max(size, offset + bytes.count)
    }

    mutating func truncate(_ newSize: Int) {
        if newSize < size {
            for k in chunks.keys where k * Self.chunk >= newSize { chunks[k] = nil }
            let index = newSize / Self.chunk, inChunk = newSize % Self.chunk
            if inChunk > 0, var c = chunks[index] {
                for i in inChunk..<Self.chunk { c[i] = 0 }
                chunks[index] = c
            }
        }
        size = newSize
    }

    func read(_ offset: Int, _ length: Int) -> [UInt8] {
        let end = min(size, offset + length)
        guard end > offset else { return [] }
        var out = [UInt8](repeating: 0, count: end - offset)
        var at = offset
        while at < end {
            let index = at / Self.chunk, inChunk = at % Self.chunk
            let n = min(Self.chunk - inChunk, end - at)
            if let c = chunks[index] { out.replaceSubrange((at - offset)..<(at - offset + n), with: c[inChunk..<(inChunk + n)]) }
            at += n
        }
        return out
    }
}

/// What the two roots disagreed on, or what the model did not expect.
struct StressFailure: Error, CustomStringConvertible {
    let description: String
}

final class StressRun {
    enum Entry { case dir, file(Int) }
    struct Handle { let inode: Int; var fds: [Int32] }

    let roots: [String]          // [plain, drive], the same subfolder under each
    let p: StressParameters
    let operations: Int
    var rng: SeededGenerator
    let pool: [UInt8]            // random bytes written slices of
    var entries: [String: Entry] = ["": .dir]
    var inodes: [Int: ModelFile] = [:]
    var handles: [Handle] = []
    var nextInode = 1, nextName = 1
    var log: [String] = []       // the last operations, for the failure message
    var step = 0
    var counts: [String: Int] = [:]

    init(roots: [String], parameters: StressParameters, seed: UInt64, operations: Int, pool: [UInt8]) {
        self.roots = roots
        self.p = parameters
        self.operations = operations
        rng = SeededGenerator(seed: seed)
        self.pool = pool
    }

    // MARK: Running

    /// Runs the operations, closes every handle; throws at the first disagreement.
    func run() throws {
        for r in roots { if mkdir(r, 0o755) != 0 && errno != EEXIST { throw StressFailure(description: "mkdir \(r): errno \(errno)") } }
        defer { for h in handles { for fd in h.fds { close(fd) } }; handles.removeAll() }
        for i in 0..<operations {
            step = i
            try one()
        }
        while !handles.isEmpty { try closeHandle(0) }
        try checkEveryFile()
    }

    func fail(_ what: String) -> StressFailure {
        StressFailure(description: "step \(step) of seed \(p.seed) (root \(roots[1])): \(what)\nlast operations:\n  " + log.suffix(12).joined(separator: "\n  "))
    }

    func note(_ s: String) {
        log.append("\(step): \(s)"); if ProcessInfo.processInfo.environment["VDRIVE_STRESS_TRACE"] != nil { print("\((roots[1] as NSString).lastPathComponent) \(step): \(s)") }
        if log.count > 64 { log.removeFirst(32) }
        counts[String(s.prefix { $0 != " " }), default: 0] += 1
    }

    /// Runs `body` on each root; the results (0 or an errno) must agree. Returns them.
    @discardableResult
    func both(_ what: String, _ body: (Int) -> Int32) throws -> Int32 {
        note(what)
        let results = roots.indices.map { i -> Int32 in
            let r = body(i)
            return r
        }
        if results[0] != results[1] {
            throw fail("\(what): plain folder \(name(results[0])), mount \(name(results[1]))")
        }
        return results[0]
    }

    /// open(2) on both sides; on a disagreement the descriptor that did open is closed
    /// (an open one on the mount would keep it busy) before the failure is thrown.
    func openBoth(_ what: String, _ rel: String, _ flags: Int32, _ mode: mode_t = 0) throws -> (Int32, [Int32]) {
        var fds: [Int32] = []
        do {
            let r = try both(what) { i in
                let fd = open(path(i, rel), flags, mode)
                fds.append(fd)
                return rc(fd)
            }
            return (r, fds)
        } catch {
            for fd in fds where fd >= 0 { close(fd) }
            throw error
        }
    }

    func name(_ e: Int32) -> String { e == 0 ? "ok" : "errno \(e) (\(String(cString: strerror(e))))" }
    /// 0 for a call that worked (0, a descriptor, a count), else its errno.
    func rc(_ r: Int32) -> Int32 { r >= 0 ? 0 : errno }
    func rc(_ r: Int) -> Int32 { r >= 0 ? 0 : errno }

    func path(_ i: Int, _ rel: String) -> String { rel.isEmpty ? roots[i] : roots[i] + "/" + rel }

    func int(_ range: Range<Int>) -> Int { Int.random(in: range, using: &rng) }
    func chance(_ percent: Int) -> Bool { int(0..<100) < percent }

    var dirs: [String] { entries.compactMap { if case .dir = $0.value { return $0.key } else { return nil } }.sorted() }
    var files: [String] { entries.compactMap { if case .file = $0.value { return $0.key } else { return nil } }.sorted() }

    func newName(in dir: String, prefix: String) -> String {
        defer { nextName += 1 }
        return (dir.isEmpty ? "" : dir + "/") + "\(prefix)\(nextName)"
    }

    func bytes(_ count: Int) -> ArraySlice<UInt8> {
        let start = int(0..<(pool.count - count))
        return pool[start..<(start + count)]
    }

    /// A write length: mostly small, sometimes up to 1 MiB.
    func writeLength() -> Int { chance(80) ? int(1..<16_384) : int(16_384..<(1 << 20)) }

    // MARK: Operations

    func one() throws {
        let roll = int(0..<100)
        switch roll {
        case 0..<8: try create()
        case 8..<28: try write()
        case 28..<34: try append()
        case 34..<42: try truncate()
        case 42..<56: try read()
        case 56..<61: try rename()
        case 61..<65: try link()
        case 65..<70: try unlink()
        case 70..<75: try makeDirectory()
        case 75..<78: try removeDirectory()
        case 78..<82: try changeMode()
        case 82..<86: try fsyncHandle()
        case 86..<92: if handles.isEmpty { try reopen() } else { try closeHandle(int(0..<handles.count)) }
        case 92..<96: try reopen()
        default: try statCheck()
        }
    }

    func create() throws {
        let dir = dirs[int(0..<dirs.count)]
        let rel = newName(in: dir, prefix: "f")
        let mode: mode_t = [0o644, 0o600, 0o640, 0o755][int(0..<4)]
        let (r, fds) = try openBoth("create \(rel) \(String(mode, radix: 8))", rel, O_CREAT | O_EXCL | O_RDWR, mode)
        guard r == 0 else { return }
        inodes[nextInode] = ModelFile(mode: UInt32(mode))
        entries[rel] = .file(nextInode)
        if handles.count < 8 { handles.append(Handle(inode: nextInode, fds: fds)) } else { for fd in fds { close(fd) } }
        nextInode += 1
    }

    /// A handle on a random file (opens one when none is open on it).
    func someHandle() throws -> Int? {
        if !handles.isEmpty && chance(75) { return int(0..<handles.count) }
        try reopen()
        return handles.isEmpty ? nil : handles.count - 1
    }

    func write() throws {
        guard let h = try someHandle() else { return }
        var file = inodes[handles[h].inode]!
        let length = writeLength()
        let offset: Int
        if chance(6) {
            offset = int(0..<(p.sparseLimit - length))            // far, sparse
        } else if chance(50) && file.size > 0 {
            offset = int(0..<file.size)                            // overwrite in place (and maybe past the end)
        } else {
            offset = int(0..<(min(file.size, p.sparseLimit - length - 65_536) + 65_536))   // near the end
        }
        let data = bytes(length)
        try both("write \(handles[h].inode) at \(offset) len \(length)") { i in
            data.withUnsafeBytes { rc(pwrite(handles[h].fds[i], $0.baseAddress, length, off_t(offset)) == length ? 0 : -1) }
        }
        file.write(data, at: offset)
        inodes[handles[h].inode] = file
    }

    func append() throws {
        let all = files
        guard !all.isEmpty else { return try create() }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        let data = bytes(chance(70) ? int(1..<200) : writeLength())
        if inodes[ino]!.size + data.count > p.sparseLimit { return try truncate() }   // files stay within the limit
        try both("append \(rel) len \(data.count)") { i in
            let fd = open(path(i, rel), O_WRONLY | O_APPEND)
            guard fd >= 0 else { return errno }
            defer { close(fd) }
            return data.withUnsafeBytes { rc(Glibc.write(fd, $0.baseAddress, data.count) == data.count ? 0 : -1) }
        }
        inodes[ino]!.write(data, at: inodes[ino]!.size)
    }

    func truncate() throws {
        let all = files
        guard !all.isEmpty else { return try create() }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        let size = inodes[ino]!.size
        let newSize: Int
        switch int(0..<5) {
        case 0: newSize = 0
        case 1: newSize = size > 0 ? int(0..<size) : 0                         // down
        case 4: newSize = int(1..<8192)                                         // a header's worth, up or down
        case 2: newSize = min(p.sparseLimit, size + int(1..<(1 << 20)))       // up a little
        default: newSize = chance(30) ? p.sparseLimit : int(0..<p.sparseLimit) // far up (sparse)
        }
        let open = handles.firstIndex { $0.inode == ino }
        if let h = open, chance(50) {
            try both("ftruncate \(rel) to \(newSize)") { i in rc(ftruncate(handles[h].fds[i], off_t(newSize))) }
        } else {
            try both("truncate \(rel) to \(newSize)") { i in rc(Glibc.truncate(path(i, rel), off_t(newSize))) }
        }
        inodes[ino]!.truncate(newSize)
    }

    func read() throws {
        let ino: Int
        var fds: [Int32]
        var opened = false
        if !handles.isEmpty && chance(60) {
            let h = handles[int(0..<handles.count)]
            ino = h.inode
            fds = h.fds
        } else {
            let all = files
            guard !all.isEmpty else { return }
            let rel = all[int(0..<all.count)]
            guard case .file(let i) = entries[rel]! else { return }
            ino = i
            let (r, opened2) = try openBoth("open \(rel) for reading", rel, O_RDONLY)
            guard r == 0 else { return }
            fds = opened2
            opened = true
        }
        defer { if opened { for fd in fds { close(fd) } } }
        let file = inodes[ino]!
        let length = chance(80) ? int(1..<65_536) : int(65_536..<(1 << 20))
        let offset = file.size > 0 && chance(90) ? int(0..<file.size) : int(0..<(file.size + 4096))
        note("read \(ino) at \(offset) len \(length)")
        let expected = file.read(offset, length)
        for i in roots.indices {
            var buffer = [UInt8](repeating: 0xEE, count: length)
            var got = 0
            while got < length {
                let n = buffer.withUnsafeMutableBytes { pread(fds[i], $0.baseAddress! + got, length - got, off_t(offset + got)) }
                if n < 0 { throw fail("read \(ino) at \(offset): errno \(errno) on \(i == 0 ? "the plain folder" : "the mount")") }
                if n == 0 { break }
                got += n
            }
            if got != expected.count || buffer[0..<got] != expected[...] {
                let firstDiff = zip(buffer[0..<got], expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                throw fail("read \(ino) at \(offset) len \(length) on \(i == 0 ? "the plain folder" : "the mount"): got \(got) bytes, the model has \(expected.count) (size \(file.size))"
                           + (firstDiff.map { ", first different byte at \(offset + $0)" } ?? ""))
            }
        }
    }

    func rename() throws {
        let candidates = entries.keys.filter { !$0.isEmpty }.sorted()
        guard !candidates.isEmpty else { return }
        let from = candidates[int(0..<candidates.count)]
        let isDir: Bool = { if case .dir = entries[from]! { return true } else { return false } }()
        let targetDirs = dirs.filter { !isDir || ($0 != from && !$0.hasPrefix(from + "/")) }
        let dir = targetDirs[int(0..<targetDirs.count)]
        // Onto an existing file sometimes (it is replaced), else a new name.
        let existing = files.filter { $0 != from && (($0 as NSString).deletingLastPathComponent == dir) }
        let to = !isDir && !existing.isEmpty && chance(30) ? existing[int(0..<existing.count)] : newName(in: dir, prefix: isDir ? "d" : "f")
        let r = try both("rename \(from) -> \(to)") { i in rc(Glibc.rename(path(i, from), path(i, to))) }
        guard r == 0 else { return }
        if case .file(let replaced) = entries[to] ?? .dir {
            // Two names of one file: rename(2) succeeds and does nothing.
            if case .file(let moving) = entries[from]!, moving == replaced { return }
            dropLink(replaced)
        }
        var moved: [String: Entry] = [:]
        for (k, v) in entries where k == from || k.hasPrefix(from + "/") {
            moved[to + k.dropFirst(from.count)] = v
            entries[k] = nil
        }
        for (k, v) in moved { entries[k] = v }
    }

    func link() throws {
        let all = files
        guard !all.isEmpty else { return }
        let from = all[int(0..<all.count)]
        guard case .file(let ino) = entries[from]! else { return }
        let d = dirs
        let to = chance(10) ? all[int(0..<all.count)] : newName(in: d[int(0..<d.count)], prefix: "l")
        let r = try both("link \(from) -> \(to)") { i in rc(Glibc.link(path(i, from), path(i, to))) }
        guard r == 0 else { return }
        entries[to] = .file(ino)
        inodes[ino]!.nlink += 1
    }

    func dropLink(_ ino: Int) {
        inodes[ino]!.nlink -= 1
        if inodes[ino]!.nlink == 0 && !handles.contains(where: { $0.inode == ino }) { inodes[ino] = nil }
    }

    func unlink() throws {
        let all = files
        guard !all.isEmpty else { return }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        let r = try both("unlink \(rel)") { i in rc(Glibc.unlink(path(i, rel))) }
        guard r == 0 else { return }
        entries[rel] = nil
        dropLink(ino)
    }

    func makeDirectory() throws {
        let d = dirs
        guard d.count < 40 else { return }
        let rel = newName(in: d[int(0..<d.count)], prefix: "d")
        let r = try both("mkdir \(rel)") { i in rc(mkdir(path(i, rel), 0o755)) }
        if r == 0 { entries[rel] = .dir }
    }

    func removeDirectory() throws {
        let d = dirs.filter { !$0.isEmpty }
        guard !d.isEmpty else { return }
        let rel = d[int(0..<d.count)]
        let empty = !entries.keys.contains { $0.hasPrefix(rel + "/") }
        let r = try both("rmdir \(rel)" + (empty ? "" : " (not empty)")) { i in rc(rmdir(path(i, rel))) }
        if empty != (r == 0) { throw fail("rmdir \(rel): \(name(r)) on both, the model says \(empty ? "empty" : "not empty")") }
        if r == 0 { entries[rel] = nil }
    }

    func changeMode() throws {
        let all = files
        guard !all.isEmpty else { return }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        let mode: mode_t = [0o644, 0o600, 0o640, 0o755, 0o444, 0o700][int(0..<6)]
        let r = try both("chmod \(rel) \(String(mode, radix: 8))") { i in rc(chmod(path(i, rel), mode)) }
        if r == 0 { inodes[ino]!.mode = UInt32(mode) }
    }

    func fsyncHandle() throws {
        guard !handles.isEmpty else { return }
        let h = int(0..<handles.count)
        try both("fsync \(handles[h].inode)") { i in rc(fsync(handles[h].fds[i])) }
    }

    func closeHandle(_ h: Int) throws {
        let handle = handles.remove(at: h)
        try both("close \(handle.inode)") { i in rc(close(handle.fds[i])) }
        if let f = inodes[handle.inode], f.nlink == 0, !handles.contains(where: { $0.inode == handle.inode }) { inodes[handle.inode] = nil }
    }

    func reopen() throws {
        let all = files
        guard !all.isEmpty, handles.count < 8 else { return }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        let (r, fds) = try openBoth("open \(rel)", rel, O_RDWR)
        if r == 0 { handles.append(Handle(inode: ino, fds: fds)) }
    }

    func statCheck() throws {
        let all = files
        guard !all.isEmpty else { return }
        let rel = all[int(0..<all.count)]
        guard case .file(let ino) = entries[rel]! else { return }
        try checkStat(rel, inodes[ino]!)
    }

    func checkStat(_ rel: String, _ f: ModelFile) throws {
        note("stat \(rel)")
        for i in roots.indices {
            var st = stat()
            if lstat(path(i, rel), &st) != 0 { throw fail("stat \(rel) on \(i == 0 ? "the plain folder" : "the mount"): errno \(errno)") }
            let got = "size \(st.st_size) mode \(String(st.st_mode & 0o7777, radix: 8)) nlink \(st.st_nlink)"
            let want = "size \(f.size) mode \(String(f.mode, radix: 8)) nlink \(f.nlink)"
            if got != want {
                var later = ""
                if i == 1 {
                    // Stale kernel attributes, or lost content? The mount's attributes are
                    // cached for 1 s: ask again once they have expired.
                    usleep(1_500_000)
                    var again = stat()
                    if lstat(path(i, rel), &again) == 0 { later = "; 1.5 s later: size \(again.st_size) mode \(String(again.st_mode & 0o7777, radix: 8)) nlink \(again.st_nlink)" }
                }
                throw fail("stat \(rel) on \(i == 0 ? "the plain folder" : "the mount"): \(got), the model has \(want)\(later)")
            }
        }
    }

    /// Every file's size, mode and link count against the model; every file's bytes
    /// against the model (compared by SHA-256 of the model's bytes, built chunk by chunk).
    func checkEveryFile() throws {
        for rel in files {
            guard case .file(let ino) = entries[rel]! else { continue }
            let f = inodes[ino]!
            try checkStat(rel, f)
            let hasher = SHA256Hasher()
            var at = 0
            while at < f.size {
                let n = min(1 << 20, f.size - at)
                let part = f.read(at, n)
                part.withUnsafeBytes { hasher.update($0) }
                at += n
            }
            let want = hasher.finish().hex
            for i in roots.indices {
                let got = try sha256(ofFile: path(i, rel))
                if got != want { throw fail("content of \(rel) (\(f.size) bytes) on \(i == 0 ? "the plain folder" : "the mount") differs from the model") }
            }
        }
    }
}

/// A folder's tree as comparable lines: per entry, its type, size, mode, link count and
/// the SHA-256 of a file's bytes.
func treeSnapshot(_ root: String) throws -> [String: String] {
    var out: [String: String] = [:]
    func walk(_ rel: String) throws {
        let full = rel.isEmpty ? root : root + "/" + rel
        for name in try FileManager.default.contentsOfDirectory(atPath: full) {
            let childRel = rel.isEmpty ? name : rel + "/" + name
            var st = stat()
            guard lstat(root + "/" + childRel, &st) == 0 else { throw StressFailure(description: "lstat \(childRel): errno \(errno)") }
            let mode = String(st.st_mode & 0o7777, radix: 8)
            if st.st_mode & S_IFMT == S_IFDIR {
                out[childRel] = "dir mode \(mode)"
                try walk(childRel)
            } else {
                out[childRel] = "file size \(st.st_size) mode \(mode) nlink \(st.st_nlink) sha256 \(try sha256(ofFile: root + "/" + childRel))"
            }
        }
    }
    try walk("")
    return out
}

/// Lines that differ between two snapshots ("path: plain … | mount …"), at most `limit`.
func treeDifferences(_ plain: [String: String], _ mount: [String: String], limit: Int = 12) -> [String] {
    let keys = Set(plain.keys).union(mount.keys).sorted()
    return keys.compactMap { k in
        plain[k] == mount[k] ? nil : "\(k): plain folder \(plain[k] ?? "<missing>") | mount \(mount[k] ?? "<missing>")"
    }.prefix(limit).map { $0 }
}
