import Foundation
import Crypto

/// Every name under a mount outside the Camera Roll and the generated trees: path →
/// "folder", "file <sha256> <size> x<executable>" or "symlink <target>": what two
/// devices of one workspace must agree on.
public func workspaceSnapshot(_ root: String) throws -> [String: String] {
    var out: [String: String] = [:]
    guard let walker = FileManager.default.enumerator(atPath: root) else { return [:] }
    while let relative = walker.nextObject() as? String {
        let top = relative.split(separator: "/").first.map(String.init) ?? relative
        if ["Camera Roll", "Backups", ".backup"].contains(top) { walker.skipDescendants(); continue }
        let path = root + "/" + relative
        var st = stat()
        guard lstat(path, &st) == 0 else { continue }
        switch st.st_mode & S_IFMT {
        case S_IFDIR: out[relative] = "folder"
        case S_IFLNK: out[relative] = "symlink " + ((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?")
        case S_IFREG: out[relative] = "file \(try sha256Hex(ofFile: path)) \(st.st_size) x\(st.st_mode & 0o100 != 0)"
        default: out[relative] = "special"
        }
    }
    return out
}

/// The SHA-256 of a file's bytes, read in 1 MiB pieces.
public func sha256Hex(ofFile path: String) throws -> String {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw SnapshotFailure(description: "\(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    let hasher = SHA256Hasher()
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
        if n < 0 { if errno == EINTR { continue }; throw SnapshotFailure(description: "\(path): \(String(cString: strerror(errno)))") }
        if n == 0 { break }
        buffer.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
    }
    return hasher.finish().hex
}

public struct SnapshotFailure: Error, CustomStringConvertible {
    public let description: String
}
