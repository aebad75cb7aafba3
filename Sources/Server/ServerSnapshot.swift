import Crypto
import Foundation
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// A consistent copy of a running embedded server's data folder (`vdrive serve snapshot`),
/// from which a new server starts and on which devices carry on without sending again
/// what they sent.
///
/// Consistent: the records are copied in one read transaction (SQLite's `VACUUM INTO`),
/// so they are the server as it was at one moment, whatever it does meanwhile. Then the
/// blocks those records name are brought over: blocks are immutable files named by
/// their hash, so on the same file system each is a hard link (no byte copied), else a
/// copy made durable before the records are; a block in the store's pack files is
/// copied out into a file of its own (checked against its hash on the way). A block the
/// records name but the folder no longer has (removed after the records were copied)
/// fails the snapshot: it is never written with a record that names bytes it lacks. Uploads in progress keep their rows
/// and lose their staged bytes: their devices resume them from offset 0.
public enum ServerSnapshot {
    public struct Summary: Sendable {
        public var blocks = 0
        public var bytes: Int64 = 0
        /// Blocks hard-linked (the rest were copied).
        public var linked = 0
        /// Block rows no record named whose files were gone: left out of the copy.
        public var dropped = 0
    }

    public struct Failure: Error, CustomStringConvertible {
        public enum Kind: Sendable { case noSource, destinationInUse, io }
        public let kind: Kind
        public let description: String
    }

    /// Copies `dataDirectory` (server.db and, with `blocks`, blobs/) into `destination`,
    /// which must not exist or be an empty folder.
    public static func take(dataDirectory: String, to destination: String, blocks: Bool) throws(Failure) -> Summary {
        let source = dataDirectory + "/server.db"
        guard FileIO.exists(source) else {
            throw Failure(kind: .noSource, description: "no server records in \(dataDirectory) (no server.db); name the running server's folder with --data")
        }
        if FileIO.exists(destination), !((try? FileIO.listDirectory(destination)) ?? ["?"]).isEmpty {
            throw Failure(kind: .destinationInUse, description: "\(destination) is not empty; a snapshot goes into a new or empty folder")
        }
        do {
            return try copy(source: source, blobRoot: dataDirectory + "/blobs", to: destination, blocks: blocks)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(kind: .io, description: "the snapshot into \(destination) failed: \(error); nothing there is usable, remove it and run it again")
        }
    }

    private static func copy(source: String, blobRoot: String, to destination: String, blocks: Bool) throws -> Summary {
        try FileIO.makeDirectories(destination)
        chmod(destination, 0o700)
        let part = destination + "/server.db.part"
        do {
            let db = try Database(path: source, options: .init(readOnly: true, create: false))
            try db.execute("VACUUM INTO '\(part.replacingOccurrences(of: "'", with: "''"))'")
        }
        chmod(part, 0o600)
        var summary = Summary()
        if blocks {
            let snapshot = try Database(path: part)
            let store = try BlobStore(root: destination + "/blobs")
            chmod(destination + "/blobs", 0o700)
            let packed = try PackedBlocks(root: blobRoot)
            var gone: [String] = []
            for (hex, size) in try snapshot.query("SELECT hash, size FROM blocks", row: { ($0.string(0) ?? "", $0.int64(1)) }) {
                guard let digest = SHA256Digest(hex: hex) else { continue }
                let from = blobRoot + "/" + hex.prefix(2) + "/" + hex
                try store.makeFolder(for: digest)
                switch try bring(from, to: store.path(for: digest)) {
                case .linked: summary.linked += 1
                case .copied: break
                case .missing:
                    guard try unpack(digest, from: packed, to: store.path(for: digest)) else {
                        gone.append(hex)
                        continue
                    }
                }
                summary.blocks += 1
                summary.bytes += size
            }
            for hex in gone {
                let named = try snapshot.queryOne("SELECT c.hash FROM contents c, json_each(c.blocks) j WHERE j.value = ? LIMIT 1", hex) { $0.string(0) ?? "" }
                if let named {
                    throw Failure(kind: .io, description: "block \(hex) of content \(named) left \(blobRoot) while the snapshot ran; run it again (a second failure means the server's folder lacks a block its records name)")
                }
                try snapshot.run("DELETE FROM blocks WHERE hash = ?", hex)
                summary.dropped += 1
            }
            try FileIO.syncFileSystem(destination + "/blobs")
        }
        try FileIO.rename(part, destination + "/server.db")
        try FileIO.syncDirectory(destination)
        return summary
    }

    private enum Brought { case linked, copied, missing }

    /// A durable file of a block in the pack file; false when it is not there (or no
    /// longer: a range punched since reads zeros, which do not hash to its name).
    private static func unpack(_ digest: SHA256Digest, from packed: PackedBlocks, to path: String) throws -> Bool {
        guard let range = try packed.range(digest) else { return false }
        let bytes = try packed.read(range)
        guard SHA256Hasher.digest(bytes) == digest else { return false }
        let output = try FileIO.open(path + ".part", O_WRONLY | O_CREAT | O_TRUNC, 0o400)
        defer { FileIO.close(output) }
        try bytes.withUnsafeBytes { try FileIO.pwrite(output, $0, at: 0) }
        try FileIO.fdatasync(output)
        try FileIO.rename(path + ".part", path)
        return true
    }

    /// A hard link of an immutable block file, or a durable copy across file systems.
    private static func bring(_ from: String, to: String) throws -> Brought {
        if link(from, to) == 0 { return .linked }
        switch errno {
        case ENOENT: return .missing
        case EEXIST: return .linked
        case EXDEV, EPERM, EMLINK: break
        default: throw Errno.current
        }
        let input: Int32
        do { input = try FileIO.open(from, O_RDONLY) } catch Errno.noSuchFileOrDirectory { return .missing }
        defer { FileIO.close(input) }
        let output = try FileIO.open(to + ".part", O_WRONLY | O_CREAT | O_TRUNC, 0o400)
        defer { FileIO.close(output) }
        let length = Int64(try FileIO.status(input).st_size)
        try FileIO.copyPreservingHoles(from: input, to: output, length: length)
        try FileIO.fdatasync(output)
        try FileIO.rename(to + ".part", to)
        return .copied
    }
}
