import Crypto

/// How much of a file to fetch for one read of content this drive does not hold, kept
/// per open file: a window that ramps as the kernel's readahead does.
///
/// A *run* is a stretch of reads in order. It starts at a read that does not continue
/// the last one (the first read, a seek) with the chunks (`Blocks.chunkSize`) the read
/// covers. Each time a reader of the run reads past what has been fetched, the run's
/// window doubles: as much again as the run has fetched so far, or at least the chunks
/// the read covers. From the start of a file read 8 KiB at a time: 256 KiB, then 512 KiB,
/// 1 MiB, 2 MiB and 4 MiB fetched in all. Once the run has fetched a whole block's worth,
/// its reads fetch whole blocks and the blocks after them are fetched ahead
/// (`wholeBlocks`), as a copy or a player wants.
///
/// Why not whole blocks at once: a file manager sniffing a type or a thumbnailer reading
/// a header reads a few 8 KiB pieces in order, and most of the workspace may be online
/// only. Whole blocks and six ahead for them cost 28 MiB per file; the window costs the
/// 256 KiB they touch. A long read pays four more round trips in its first 4 MiB.
///
/// A read that starts anywhere in what the run has fetched, not only where the last one
/// ended, continues it: the kernel sends a mapping's readahead on several threads at
/// once, so its pieces may arrive out of order. Any other read is a seek: the window
/// falls back to the chunks that read covers.
///
/// A value type: the owner guards it (the open file's lock).
struct ReadaheadWindow {
    /// What one read is to fetch: `fetch` (chunk-aligned, within the file) covers the
    /// read, and the window ahead of it. `wholeBlocks`: fetch the read's blocks whole
    /// and the next ones ahead instead.
    struct Plan: Equatable {
        var fetch: Range<Int64>
        var wholeBlocks: Bool

        /// The part of `fetch` in block `index` of a file of `size` bytes, in the block's
        /// own offsets (empty when `fetch` does not reach it).
        func fetch(inBlock index: Int, size: Int64) -> Range<Int> {
            let blockStart = Int64(index) * Int64(Blocks.size)
            let blockEnd = min(size, blockStart + Int64(Blocks.size))
            let from = max(fetch.lowerBound, blockStart), to = min(fetch.upperBound, blockEnd)
            guard from < to else { return 0..<0 }
            return Int(from - blockStart)..<Int(to - blockStart)
        }

        /// The last block `fetch` reaches into.
        var lastBlock: Int { Int((max(fetch.upperBound, 1) - 1) / Int64(Blocks.size)) }
    }

    /// Where the run began (chunk-aligned); nil before the first read.
    private(set) var start: Int64?
    /// The end of what the run has asked to fetch.
    private(set) var end: Int64 = 0

    static let chunk = Int64(Blocks.chunkSize)

    /// Bytes fetched by the run so far: its window.
    var extent: Int64 { start.map { end - $0 } ?? 0 }

    /// The plan for a read of `count` bytes at `offset` of a file of `size` bytes, and the
    /// window moved past it. The caller has checked the read: `offset` within the file,
    /// `count` positive and at most a FUSE request's size.
    mutating func plan(offset: Int64, count: Int, size: Int64) -> Plan {
        let readEnd = min(size, offset + Int64(count))
        let first = offset - offset % Self.chunk
        let continues = start.map { offset >= $0 && offset <= end } ?? false
        if !continues {
            start = first
            end = first
        }
        let runStart = start ?? first
        if extent >= Int64(Blocks.size) {
            // Whole blocks: the run has fetched up to the end of the read's last block.
            let block = Int64(Blocks.size)
            end = max(end, min(size, (readEnd + block - 1) / block * block))
            return Plan(fetch: first..<readEnd, wholeBlocks: true)
        }
        guard readEnd > end else { return Plan(fetch: first..<readEnd, wholeBlocks: false) }
        let window = max(Self.chunk, end - runStart)
        end = min(size, max(Self.roundUp(readEnd), end + window))
        return Plan(fetch: first..<end, wholeBlocks: false)
    }

    static func roundUp(_ offset: Int64) -> Int64 {
        let r = offset % chunk
        return r == 0 ? offset : offset + (chunk - r)
    }
}
