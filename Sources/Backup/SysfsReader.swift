import Storage

/// Small-file reads under a root folder ("/" in production, a temp tree in tests).
struct SysfsReader: Sendable {
    let root: String

    /// `root` + an absolute path like "/sys/class/power_supply".
    func path(_ absolute: String) -> String {
        root == "/" || root.isEmpty ? absolute : root + absolute
    }

    /// A file's text without the trailing newline; nil when missing or unreadable.
    func read(_ absolute: String) -> String? {
        guard let fd = try? FileIO.open(path(absolute), O_RDONLY) else { return nil }
        defer { FileIO.close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 20 {
            let n = chunk.withUnsafeMutableBytes { (try? FileIO.pread(fd, into: $0, at: Int64(bytes.count))) ?? 0 }
            if n <= 0 { break }
            bytes += chunk[0..<n]
            if n < chunk.count { break }
        }
        var text = String(decoding: bytes, as: UTF8.self)
        while text.hasSuffix("\n") { text.removeLast() }
        return text
    }

    func list(_ absolute: String) -> [String] {
        ((try? FileIO.listDirectory(path(absolute))) ?? []).sorted()
    }

    /// The last path component a symlink points to ("cdc_ether" for .../drivers/cdc_ether).
    func linkTargetName(_ absolute: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(path(absolute), &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return target.split(separator: "/").last.map(String.init)
    }
}

#if canImport(Glibc)
import Glibc
#endif
