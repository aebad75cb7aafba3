import Crypto

/// A block list as `backup_items.blocks` stores it: a JSON array of lowercase hex digests,
/// `["ab12…","cd34…"]`. JSON rather than a blob of raw digests so the drive's SQL triggers
/// can pin each block with `json_each(NEW.blocks)`. Digests are hex only (no quotes or
/// escapes to handle), so the text is written and read without a JSON library.
enum BlockListJSON {
    static func encode(_ blocks: [SHA256Digest]) -> String {
        "[" + blocks.map { "\"\($0.hex)\"" }.joined(separator: ",") + "]"
    }

    /// nil when the text is not such an array (a corrupt row).
    static func decode(_ text: String) -> [SHA256Digest]? {
        var body = Substring(text.filter { !$0.isWhitespace })
        guard body.first == "[", body.last == "]" else { return nil }
        body = body.dropFirst().dropLast()
        if body.isEmpty { return [] }
        var out: [SHA256Digest] = []
        for element in body.split(separator: ",", omittingEmptySubsequences: false) {
            guard element.count == 66, element.first == "\"", element.last == "\"",
                  let digest = SHA256Digest(hex: String(element.dropFirst().dropLast())) else { return nil }
            out.append(digest)
        }
        return out
    }
}
