import Foundation
import Storage
import Testing
import TestSupport
@testable import HTTPClient

/// A download written past the page cache (`DirectSink`): pieces of any size gather
/// into aligned megabytes, the unaligned tail goes through the ordinary descriptor, and
/// the file holds exactly the bytes, at their offset.
@Suite(.tags(.logic)) struct DirectSinkTests {
    /// With a real O_DIRECT descriptor where the disk takes one (a misaligned write then
    /// fails with EINVAL), else with an ordinary one (the buffering alone).
    @Test(arguments: [true, false]) func piecesOfAnySizeLandAtTheirPlace(_ useODirect: Bool) throws {
        let dir = TemporaryDirectory(); defer { dir.remove() }
        let path = dir.path + "/file"
        let buffered = try FileIO.open(path, O_RDWR | O_CREAT, 0o644)
        defer { FileIO.close(buffered) }
        let offset: Int64 = 4 << 20
        let bytes = randomBytes((3 << 20) + 12_345, seed: 77)
        try FileIO.ftruncate(buffered, offset + Int64(bytes.count))
        let direct: Int32
        if useODirect {
            guard let d = FileIO.openDirectForWriting(path) else {
                // Refused only off a local disk's file system (tmpfs, overlays): the
                // restore then writes through the page cache.
                let type = FileIO.fileSystemType(buffered)
                #expect(!FileIO.directWriteFileSystems.contains(type), "O_DIRECT refused on a local disk (file system 0x\(String(type, radix: 16)))")
                return
            }
            direct = d
        } else {
            direct = try FileIO.open(path, O_WRONLY)
        }
        defer { FileIO.close(direct) }
        let buffer = DirectSink.makeBuffer()
        defer { buffer.deallocate() }
        let sink = try #require(DirectSink(direct: direct, buffered: buffered, offset: offset, buffer: buffer))
        #expect(DirectSink(direct: direct, buffered: buffered, offset: offset + 100, buffer: buffer) == nil, "an unaligned start writes through the page cache")
        var at = 0, size = 1
        bytes.withUnsafeBytes { raw in
            while at < bytes.count {
                let n = min(size, bytes.count - at)
                #expect(sink.append(UnsafeRawBufferPointer(rebasing: raw[at..<(at + n)])), "errno \(sink.error)")
                at += n
                size = size * 7 % 300_007 + 1   // sizes from 1 byte to about 300 KB
            }
        }
        #expect(sink.finish(), "errno \(sink.error)")
        var back = [UInt8](repeating: 0, count: bytes.count)
        let n = try back.withUnsafeMutableBytes { try FileIO.pread(buffered, into: $0, at: offset) }
        #expect(n == bytes.count && back == bytes)
        var head = [UInt8](repeating: 1, count: 4096)
        _ = try head.withUnsafeMutableBytes { try FileIO.pread(buffered, into: $0, at: 0) }
        #expect(head.allSatisfy { $0 == 0 }, "nothing written before the offset")
    }
}
