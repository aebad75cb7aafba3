import Foundation
import Storage

/// Whole-file replacement: write a sibling temporary file, rename it over the old one.
/// Readers see the old file or the new one, never a mix.
public enum AtomicFile {
    /// `durable`: fdatasync before the rename (settings); status files skip it.
    public static func write(_ data: Data, to path: String, durable: Bool = true) throws {
        let folder = (path as NSString).deletingLastPathComponent
        if !folder.isEmpty { try FileIO.makeDirectories(folder) }
        let temporary = path + ".tmp-\(getpid())"
        let fd = try FileIO.open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        do {
            try data.withUnsafeBytes { try FileIO.pwrite(fd, $0, at: 0) }
            if durable { try FileIO.fdatasync(fd) }
        } catch {
            FileIO.close(fd)
            try? FileIO.unlink(temporary)
            throw error
        }
        FileIO.close(fd)
        do {
            try FileIO.rename(temporary, path)
        } catch {
            try? FileIO.unlink(temporary)
            throw error
        }
    }
}
