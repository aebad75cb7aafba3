/// `GET /v1/blocks/<hash>/chunks`: the SHA-256 of each `chunkSize` piece of one stored
/// block, in order (the last may be shorter). A reader that needs part of a block
/// fetches the pieces covering it with a Range and checks each against this list
/// before using a byte, so a partial read is verified without fetching the whole block.
public struct BlockChunksResponse: Codable, Sendable, Equatable {
    public var block: String
    public var size: Int64
    public var chunkSize: Int
    public var chunks: [String]
    public init(block: String, size: Int64, chunkSize: Int, chunks: [String]) {
        self.block = block; self.size = size; self.chunkSize = chunkSize; self.chunks = chunks
    }
}

extension API {
    /// `/v1/blocks/<hash>/chunks`: a stored block's chunk digests.
    public static let chunksSuffix = "/chunks"
}
