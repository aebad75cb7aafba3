import Client
import Crypto
import Foundation
import Protocol
import TestSupport

/// The first-mount row's workspace, put on the server through its API (as a device
/// with a long history would have left it), and the count of what `ls -R` lists.
extension SyncBenchmark {
    struct Seeded {
        /// Folders under `many/`.
        var folders: Int
        /// What `ls -R` lists under `many/`: the folders and the files.
        var entries: Int
        /// The path of the last file put.
        var last: String
    }

    /// `files` small files in `many/dNNNN/` folders of 100, through a device token of
    /// their own: 1,000 distinct contents of 1-8 KiB uploaded once, each named by 1 file
    /// in 1,000 (the drive never fetches them: listing reads names and sizes only).
    static func seed(_ workspace: SyncWorkspace, files: Int) throws -> Seeded {
        let token = try String(contentsOfFile: try workspace.addToken("seed"), encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let client = WorkspaceClient(baseURL: workspace.server.base, token: token)
        var sizes = SeededGenerator(seed: 11)
        var contents: [BlockManifest] = []
        let scratch = workspace.dir + "/seed-content"
        for i in 0..<min(1_000, files) {
            let bytes = randomBytes(Int.random(in: 1024...8192, using: &sizes), seed: UInt64(50_000 + i))
            try writeWhole(scratch, bytes)
            let fd = open(scratch, O_RDONLY)
            guard fd >= 0 else { throw Bench.Failure(description: "cannot open \(scratch): errno \(errno)") }
            defer { close(fd) }
            contents.append(try client.uploadFile(fd: fd, size: Int64(bytes.count)))
        }
        unlink(scratch)

        func id(_ kind: UInt8, _ n: Int) -> String { String(format: "%02x%030x", kind, n) }
        let folders = (files + 99) / 100
        let now = Int64(Date().timeIntervalSince1970) * 1_000_000_000
        var changes: [TreeChange] = [.put(TreePut(id: id(1, 0), base: 0, parent: TreeNode.rootID, name: "many", kind: .folder, mtime: 0))]
        for f in 0..<folders {
            changes.append(.put(TreePut(id: id(2, f), base: 0, parent: id(1, 0), name: String(format: "d%04d", f), kind: .folder, mtime: 0)))
        }
        var last = ""
        for i in 0..<files {
            let c = contents[i % contents.count]
            let name = String(format: "f%06d.txt", i)
            changes.append(.put(TreePut(id: id(3, i), base: 0, parent: id(2, i / 100), name: name, kind: .file, hash: c.content.hex, size: c.size,
                                        blocks: c.blocks.map(\.hex), mtime: now)))
            last = String(format: "many/d%04d/", i / 100) + name
        }
        var refused: [String] = []
        for start in stride(from: 0, to: changes.count, by: API.maxTreeChanges) {
            let batch = Array(changes[start..<min(changes.count, start + API.maxTreeChanges)])
            let results = try client.applyTreeChanges(batch)
            for (change, r) in zip(batch, results) where r.status != 200 && r.status != 201 {
                refused.append("\(change.id): \(r.status) \(r.error ?? "") \(r.message ?? "")")
            }
            if start > 0 && (start / API.maxTreeChanges) % 20 == 0 { say("    seeded \(start) of \(changes.count) nodes") }
        }
        if let first = refused.first { throw Bench.Failure(description: "the server refused \(refused.count) of the seeded nodes, the first: \(first)") }
        return Seeded(folders: folders, entries: folders + files, last: last)
    }

    /// Runs `ls -R` on the mount and counts what it lists under `folder` (the folder's
    /// entries and theirs, all the way down).
    static func countListing(_ mountPoint: String, under folder: String) throws -> Int {
        let output = mountPoint + "-ls-R.txt"
        defer { unlink(output) }
        let outcome = TimedCommand.run("ls -R '\(mountPoint)' > '\(output)'", timeout: 600)
        guard outcome.succeeded else { throw Bench.Failure(description: "ls -R \(mountPoint): \(outcome.text { Bench.f($0) })") }
        let text = try String(contentsOfFile: output, encoding: .utf8)
        let prefix = mountPoint + "/" + folder
        var counting = false, count = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasSuffix(":") && line.hasPrefix(mountPoint) {
                let header = line.dropLast()
                counting = header == prefix || header.hasPrefix(prefix + "/")
            } else if counting && !line.isEmpty {
                count += 1
            }
        }
        return count
    }
}
