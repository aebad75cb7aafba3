import Foundation
import Client
import Crypto
import Protocol

/// A file for the curl peer: where it is, its manifest, and a file holding each block's
/// bytes (the file itself when it is one block; `split` pieces made beforehand otherwise).
struct PeerFile {
    var path: String
    let name: String
    let manifest: BlockManifest
    var blockFiles: [String]

    /// Hashes `path` (not timed: the peer is given its hashes) and, for a file of several
    /// blocks, splits it into block files under `blockDir`.
    static func prepare(path: String, name: String, blockDir: String) throws -> PeerFile {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw Bench.Failure(description: "cannot open \(path)") }
        defer { close(fd) }
        var st = stat()
        fstat(fd, &st)
        let manifest = try WorkspaceClient.manifest(fd: fd, size: Int64(st.st_size))
        var blockFiles = [path]
        if manifest.blocks.count > 1 {
            try Bench.sh("mkdir -p \(blockDir) && cd \(blockDir) && split -a 6 -d -b \(Blocks.size) \(path) \(name).")
            blockFiles = (0..<manifest.blocks.count).map { "\(blockDir)/\(name)." + String(format: "%06d", $0) }
        }
        return PeerFile(path: path, name: name, manifest: manifest, blockFiles: blockFiles)
    }
}

/// The honest peer of the drive's backup: `curl` speaking the block protocol
/// (Docs/protocol.md) the way a script would: one curl process per phase, each with
/// a config file of one request per item (`next` between them), on kept-alive
/// connections: `POST /v1/uploads` for every file (the plans), one presigned tus
/// `PATCH` per block the server lacks (with the block hash as `Upload-Checksum` and no
/// `Expect: 100-continue`), then `POST /v1/files` for every file. With `parallel`,
/// curl runs that many requests at once (`--parallel --parallel-max N`).
enum CurlPeer {
    struct Result { var blocksSent = 0; var bytesSent: Int64 = 0 }

    static func upload(_ files: [PeerFile], base: String, token: String, dir: String, parallel: Int?) throws -> Result {
        try Bench.sh("rm -rf \(dir) && mkdir -p \(dir)/req \(dir)/plan \(dir)/rec \(dir)/out")
        var head = "silent\nshow-error\nno-progress-meter\n"
        if let parallel { head += "parallel\nparallel-max = \(parallel)\n" }
        let auth = "header = \"Authorization: Bearer \(token)\"\n"

        /// One curl process POSTing a JSON body per file on one connection; the replies
        /// land in `replies/<i>.json`.
        func postEach(_ endpoint: String, bodies: String, replies: String, _ body: (Int, PeerFile) -> String) throws {
            var cfg = head
            for (i, f) in files.enumerated() {
                try body(i, f).write(toFile: "\(dir)/\(bodies)/\(i).json", atomically: false, encoding: .utf8)
                if i > 0 { cfg += "next\n" }
                cfg += "url = \"\(base)\(endpoint)\"\n" + auth + "header = \"Content-Type: application/json\"\n"
                cfg += "data-binary = \"@\(dir)/\(bodies)/\(i).json\"\noutput = \"\(dir)/\(replies)/\(i).json\"\n"
            }
            try cfg.write(toFile: "\(dir)/\(bodies).conf", atomically: false, encoding: .utf8)
            try Bench.sh("curl -K \(dir)/\(bodies).conf")
        }
        func blockList(_ f: PeerFile) -> String { f.manifest.blocks.map { "\"\($0.hex)\"" }.joined(separator: ",") }

        // 1. Plans.
        try postEach("/v1/uploads", bodies: "req", replies: "plan") { _, f in
            "{\"content\":\"\(f.manifest.content.hex)\",\"size\":\(f.manifest.size),\"blocks\":[\(blockList(f))]}"
        }

        // 2. Blocks.
        var result = Result()
        var cfg = head
        for (i, f) in files.enumerated() {
            guard let data = FileManager.default.contents(atPath: "\(dir)/plan/\(i).json"),
                  let plan = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let status = plan["status"] as? String else {
                throw Bench.Failure(description: "no upload plan for \(f.name): \(String(decoding: FileManager.default.contents(atPath: "\(dir)/plan/\(i).json") ?? Data(), as: UTF8.self))")
            }
            if status == "present" { continue }
            for b in plan["blocks"] as? [[String: Any]] ?? [] {
                let index = b["index"] as! Int, url = b["url"] as! String, offset = b["offset"] as! Int
                guard offset == 0 else { throw Bench.Failure(description: "block \(index) of \(f.name) is at offset \(offset) on a fresh server") }
                if result.blocksSent > 0 { cfg += "next\n" }
                result.blocksSent += 1
                result.bytesSent += Int64(f.manifest.length(ofBlock: index))
                cfg += "url = \"\(url)\"\nrequest = \"PATCH\"\nupload-file = \"\(f.blockFiles[index])\"\noutput = \"/dev/null\"\n"
                cfg += "header = \"Tus-Resumable: 1.0.0\"\nheader = \"Content-Type: application/offset+octet-stream\"\n"
                cfg += "header = \"Upload-Offset: 0\"\nheader = \"Upload-Checksum: \(Tus.checksumHeader(f.manifest.blocks[index].bytes))\"\n"
                cfg += "header = \"Expect:\"\n"
            }
        }
        if result.blocksSent > 0 {
            try cfg.write(toFile: "\(dir)/blocks.conf", atomically: false, encoding: .utf8)
            try Bench.sh("curl -K \(dir)/blocks.conf")
        }

        // 3. Records.
        try postEach("/v1/files", bodies: "rec", replies: "out") { i, f in
            "{\"path\":\"Camera Roll/\(f.name)\",\"hash\":\"\(f.manifest.content.hex)\",\"size\":\(f.manifest.size),\"blocks\":[\(blockList(f))],\"captureDate\":null,\"mtime\":1700000000,\"deviceSequence\":\(i + 1)}"
        }
        for (i, f) in files.enumerated() {
            let out = String(decoding: FileManager.default.contents(atPath: "\(dir)/out/\(i).json") ?? Data(), as: UTF8.self)
            guard out.contains("\"sequence\"") else { throw Bench.Failure(description: "the record of \(f.name) was refused: \(out)") }
        }
        return result
    }
}
