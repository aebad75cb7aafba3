/// The tree's wire types through `JSONWriter` and `JSONReader`: the bodies that carry
/// nodes by the thousand. The same JSON as their `Codable` conformances, which tools,
/// tests and the other bodies keep using.

extension TreeNode: JSONWritable, JSONReadable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            j.member("blocks", blocks)
            j.key("changedAt"); j.int(changedAt)
            j.key("deleted"); j.bool(deleted)
            j.member("deletedAt", deletedAt)
            j.member("deletedBy", deletedBy)
            j.key("device"); j.string(device)
            j.member("executable", executable)
            j.member("hash", hash)
            j.key("id"); j.string(id)
            j.key("kind"); j.string(kind.rawValue)
            j.key("mtime"); j.int(mtime)
            j.key("name"); j.string(name)
            j.key("parent"); j.string(parent)
            j.member("size", size)
            j.member("target", target)
            j.key("version"); j.int(version)
        }
    }

    public init(json r: inout JSONReader) throws {
        var id: String?, parent: String?, name: String?, kind: TreeNodeKind?, hash: String?, size: Int64?, mtime: Int64?
        var executable: Bool?, target: String?, version: Int64?, deleted: Bool?, deletedAt: Int64?, deletedBy: String?
        var device: String?, changedAt: Int64?, blocks: [String]?
        try r.object { key, r in
            switch key {
            case "id": id = try r.string()
            case "parent": parent = try r.string()
            case "name": name = try r.string()
            case "kind":
                let text = try r.string()
                guard let k = TreeNodeKind(rawValue: text) else {
                    throw JSONReader.Failure(field: "kind", "kind must be file, folder or symlink, got '\(text.prefix(40))'")
                }
                kind = k
            case "hash": hash = r.null() ? nil : try r.string()
            case "size": size = r.null() ? nil : try r.int64()
            case "mtime": mtime = try r.int64()
            case "executable": executable = r.null() ? nil : try r.bool()
            case "target": target = r.null() ? nil : try r.string()
            case "version": version = try r.int64()
            case "deleted": deleted = try r.bool()
            case "deletedAt": deletedAt = r.null() ? nil : try r.int64()
            case "deletedBy": deletedBy = r.null() ? nil : try r.string()
            case "device": device = try r.string()
            case "changedAt": changedAt = try r.int64()
            case "blocks": blocks = r.null() ? nil : try r.strings()
            default: try r.skip()
            }
        }
        guard let id else { throw r.missing("id") }
        guard let parent else { throw r.missing("parent") }
        guard let name else { throw r.missing("name") }
        guard let kind else { throw r.missing("kind") }
        guard let mtime else { throw r.missing("mtime") }
        guard let version else { throw r.missing("version") }
        guard let deleted else { throw r.missing("deleted") }
        guard let device else { throw r.missing("device") }
        guard let changedAt else { throw r.missing("changedAt") }
        self.init(id: id, parent: parent, name: name, kind: kind, hash: hash, size: size, mtime: mtime, executable: executable,
                  target: target, version: version, deleted: deleted, deletedAt: deletedAt, deletedBy: deletedBy, device: device,
                  changedAt: changedAt, blocks: blocks)
    }
}

extension TreePage: JSONWritable, JSONReadable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            j.key("latest"); j.int(latest)
            j.key("next"); j.int(next)
            j.key("nodes"); j.array(nodes) { $1.write(to: &$0) }
            j.member("recordsLatest", recordsLatest)
            j.key("workspace"); j.string(workspace)
        }
    }

    public init(json r: inout JSONReader) throws {
        var nodes: [TreeNode]?, next: Int64?, latest: Int64?, workspace: String?, recordsLatest: Int64?
        try r.object { key, r in
            switch key {
            case "nodes":
                var list: [TreeNode] = []
                try r.array { list.append(try TreeNode(json: &$0)) }
                nodes = list
            case "next": next = try r.int64()
            case "latest": latest = try r.int64()
            case "workspace": workspace = try r.string()
            case "recordsLatest": recordsLatest = r.null() ? nil : try r.int64()
            default: try r.skip()
            }
        }
        guard let nodes else { throw r.missing("nodes") }
        guard let next else { throw r.missing("next") }
        guard let latest else { throw r.missing("latest") }
        guard let workspace else { throw r.missing("workspace") }
        self.init(nodes: nodes, next: next, latest: latest, workspace: workspace, recordsLatest: recordsLatest)
    }
}

extension TreeResult: JSONWritable, JSONReadable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            j.member("error", error)
            j.member("field", field)
            j.member("message", message)
            j.member("missing", missing)
            if let node { j.key("node"); node.write(to: &j) }
            j.key("status"); j.int(Int64(status))
        }
    }

    public init(json r: inout JSONReader) throws {
        var status: Int64?, node: TreeNode?, error: String?, message: String?, field: String?, missing: [String]?
        try r.object { key, r in
            switch key {
            case "status": status = try r.int64()
            case "node": node = r.null() ? nil : try TreeNode(json: &r)
            case "error": error = r.null() ? nil : try r.string()
            case "message": message = r.null() ? nil : try r.string()
            case "field": field = r.null() ? nil : try r.string()
            case "missing": missing = r.null() ? nil : try r.strings()
            default: try r.skip()
            }
        }
        guard let status else { throw r.missing("status") }
        guard let code = Int(exactly: status) else { throw r.fail("a status out of range") }
        self.init(status: code, node: node, error: error, message: message, field: field, missing: missing)
    }
}

extension TreeChangesResponse: JSONWritable, JSONReadable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            j.key("results"); j.array(results) { $1.write(to: &$0) }
        }
    }

    public init(json r: inout JSONReader) throws {
        var results: [TreeResult]?
        try r.object { key, r in
            if key == "results" {
                var list: [TreeResult] = []
                try r.array { list.append(try TreeResult(json: &$0)) }
                results = list
            } else {
                try r.skip()
            }
        }
        guard let results else { throw r.missing("results") }
        self.init(results: results)
    }
}

extension TreeChange: JSONWritable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            switch self {
            case .delete(let id, let base):
                j.key("base"); j.int(base)
                j.key("id"); j.string(id)
                j.key("op"); j.string("delete")
            case .put(let p):
                j.key("base"); j.int(p.base)
                j.member("blocks", p.blocks)
                j.member("executable", p.executable)
                j.member("hash", p.hash)
                j.key("id"); j.string(p.id)
                j.key("kind"); j.string(p.kind.rawValue)
                j.key("mtime"); j.int(p.mtime)
                j.key("name"); j.string(p.name)
                j.key("op"); j.string("put")
                j.key("parent"); j.string(p.parent)
                j.member("size", p.size)
                j.member("target", p.target)
            }
        }
    }
}

extension TreeChangesRequest: JSONWritable {
    public func write(to json: inout JSONWriter) {
        json.object { j in
            j.key("changes"); j.array(changes) { $1.write(to: &$0) }
        }
    }
}

/// The server reads a device's batch of changes with `JSONReader` too, as strictly as
/// the `Codable` conformance (which stays for tools and tests): a member the operation
/// does not have is refused, so is `null` where a member may only be left out, and every
/// refusal names the member at fault (`changes.3.size`) in the words `WireJSON.describe`
/// gives a decoding error.
extension TreeChangesRequest: JSONReadable {
    public init(json r: inout JSONReader) throws {
        guard try r.valueKind() == .object else { throw JSONReader.Failure("the body must be a JSON object with the member 'changes'") }
        var changes: [TreeChange]?
        try r.object { key, r in
            guard key == "changes" else {
                throw JSONReader.Failure(field: key, "\(WireJSON.unknownFieldPrefix) '\(key)'; the fields are changes")
            }
            guard try r.valueKind() == .array else { throw JSONReader.Failure(field: key, "field 'changes' must be an array of changes") }
            var list: [TreeChange] = []
            try r.array { r in list.append(try TreeChange(json: &r, at: "changes.\(list.count)")) }
            changes = list
        }
        guard let changes else { throw r.missing("changes") }
        self.init(changes: changes)
    }
}

extension TreeChange {
    init(json r: inout JSONReader, at path: String) throws {
        guard try r.valueKind() == .object else { throw JSONReader.Failure(field: path, "field '\(path)' must be an object") }
        var op: String?, id: String?, base: Int64?, parent: String?, name: String?, kind: String?, hash: String?, size: Int64?
        var blocks: [String]?, mtime: Int64?, executable: Bool?, target: String?
        var seen: [String] = [], nulls: [String] = []
        try r.object { key, r in
            let at = "\(path).\(key)"
            seen.append(key)
            if !Self.putFields.contains(key) { try r.skip(); return }
            if r.null() { nulls.append(key); return }
            switch key {
            case "op": op = try Self.text(&r, at)
            case "id": id = try Self.text(&r, at)
            case "base": base = try Self.integer(&r, at)
            case "parent": parent = try Self.text(&r, at)
            case "name": name = try Self.text(&r, at)
            case "kind": kind = try Self.text(&r, at)
            case "hash": hash = try Self.text(&r, at)
            case "size": size = try Self.integer(&r, at)
            case "blocks":
                guard try r.valueKind() == .array else { throw JSONReader.Failure(field: at, "field '\(at)' must be an array of strings") }
                var list: [String] = []
                try r.array { r in list.append(try Self.text(&r, "\(at).\(list.count)")) }
                blocks = list
            case "mtime": mtime = try Self.integer(&r, at)
            case "executable":
                guard try r.valueKind() == .bool else { throw JSONReader.Failure(field: at, "field '\(at)' must be true or false") }
                executable = try r.bool()
            default: target = try Self.text(&r, at)   // "target", the last of putFields
            }
        }
        func field(_ key: String) -> String { "\(path).\(key)" }
        func missing(_ key: String, _ what: String) -> JSONReader.Failure {
            nulls.contains(key) ? JSONReader.Failure(field: field(key), "field '\(field(key))' must be \(what), not null")
                                : JSONReader.Failure(field: field(key), "missing field '\(field(key))'")
        }
        guard let op else { throw missing("op", "a string") }
        guard op == "delete" || op == "put" else {
            throw JSONReader.Failure(field: field("op"), "field '\(field("op"))': op must be put or delete, got '\(op.prefix(40))'")
        }
        let known = op == "delete" ? Self.deleteFields : Self.putFields
        if let key = seen.first(where: { !known.contains($0) }) {
            throw JSONReader.Failure(field: field(key), "\(WireJSON.unknownFieldPrefix) '\(key)'; the fields are \(known.joined(separator: ", "))")
        }
        guard let id else { throw missing("id", "a string") }
        guard let base else { throw missing("base", "an integer") }
        if op == "delete" {
            self = .delete(id: id, base: base)
        } else {
            guard let parent else { throw missing("parent", "a string") }
            guard let name else { throw missing("name", "a string") }
            guard let kindText = kind else { throw missing("kind", "a string") }
            guard let nodeKind = TreeNodeKind(rawValue: kindText) else {
                throw JSONReader.Failure(field: field("kind"), "field '\(field("kind"))': kind must be file, folder or symlink")
            }
            guard let mtime else { throw missing("mtime", "an integer") }
            let optionals = ["hash": "a string", "size": "an integer", "blocks": "an array of strings", "executable": "true or false", "target": "a string"]
            if let key = nulls.first(where: { optionals[$0] != nil }), let what = optionals[key] {
                throw JSONReader.Failure(field: field(key), "field '\(field(key))' must be \(what), not null; leave the field out instead")
            }
            self = .put(TreePut(id: id, base: base, parent: parent, name: name, kind: nodeKind, hash: hash, size: size, blocks: blocks,
                                mtime: mtime, executable: executable, target: target))
        }
    }

    private static func text(_ r: inout JSONReader, _ at: String) throws -> String {
        guard try r.valueKind() == .string else { throw JSONReader.Failure(field: at, "field '\(at)' must be a string") }
        return try r.string()
    }

    private static func integer(_ r: inout JSONReader, _ at: String) throws -> Int64 {
        guard try r.valueKind() == .number else { throw JSONReader.Failure(field: at, "field '\(at)' must be an integer") }
        let text = try r.numberText()
        guard let value = Int64(text) else {
            let shown = text.count <= 40 ? text : text.prefix(37) + "..."
            throw JSONReader.Failure(field: at, "field '\(at)' must be a whole number from \(Int64.min) to \(Int64.max) (each field's bounds are in GET /v1/openapi.json), got \(shown)")
        }
        return value
    }
}
