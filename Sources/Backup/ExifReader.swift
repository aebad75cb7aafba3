/// A small reader for the one EXIF field we need, DateTimeOriginal (tag 0x9003), in
/// JPEG (APP1 "Exif") and HEIF/HEIC (the `Exif` item located through `meta/iinf/iloc`).
/// It reads only the bytes it is given (a file's first `CaptureDate.prefixLength` bytes)
/// and treats every offset as hostile: out-of-range reads give nil, never a trap.
enum ExifReader {
    static func dateTimeOriginal(fileStart data: UnsafeRawBufferPointer) -> String? {
        let bytes = ByteView(data)
        if bytes.u16be(0) == 0xFFD8 { return fromJPEG(bytes) }
        if bytes.ascii(4, 4) == "ftyp" { return fromHEIF(bytes) }
        if bytes.ascii(0, 2) == "II" || bytes.ascii(0, 2) == "MM" { return fromTIFF(bytes, at: 0) }
        return nil
    }

    // MARK: JPEG: markers until APP1 "Exif\0\0", whose payload is a TIFF structure.

    static func fromJPEG(_ b: ByteView) -> String? {
        var at = 2
        while let marker = b.u16be(at), marker & 0xFF00 == 0xFF00 {
            if marker == 0xFFD9 || marker == 0xFFDA { return nil }  // end of image, start of scan
            if (0xFFD0...0xFFD7).contains(marker) || marker == 0xFF01 { at += 2; continue }
            guard let length = b.u16be(at + 2), length >= 2 else { return nil }
            if marker == 0xFFE1, b.ascii(at + 4, 6) == "Exif\0\0" {
                if let date = fromTIFF(b, at: at + 10) { return date }
            }
            at += 2 + Int(length)
        }
        return nil
    }

    // MARK: HEIF: ftyp, then meta (a full box) holding iinf (item infos) and iloc (item locations).

    static func fromHEIF(_ b: ByteView) -> String? {
        guard let meta = b.boxes(in: 0..<b.count).first(where: { $0.type == "meta" }) else { return nil }
        let children = b.boxes(in: (meta.body.lowerBound + 4)..<meta.body.upperBound)  // skip version+flags
        guard let iinf = children.first(where: { $0.type == "iinf" }),
              let iloc = children.first(where: { $0.type == "iloc" }),
              let exifID = exifItemID(b, iinf: iinf.body),
              let start = itemOffset(b, iloc: iloc.body, itemID: exifID),
              let headerOffset = b.u32be(start) else { return nil }
        // The item starts with a 4-byte offset to the TIFF header (past "Exif\0\0" if present).
        return fromTIFF(b, at: start + 4 + Int(headerOffset))
    }

    static func exifItemID(_ b: ByteView, iinf: Range<Int>) -> Int? {
        guard let version = b.u8(iinf.lowerBound) else { return nil }
        let entriesStart = iinf.lowerBound + 4 + (version == 0 ? 2 : 4)
        for infe in b.boxes(in: entriesStart..<iinf.upperBound) where infe.type == "infe" {
            let at = infe.body.lowerBound
            guard let infeVersion = b.u8(at), infeVersion >= 2 else { continue }
            let idSize = infeVersion == 2 ? 2 : 4
            guard let id = idSize == 2 ? b.u16be(at + 4).map(Int.init) : b.u32be(at + 4).map(Int.init) else { continue }
            if b.ascii(at + 4 + idSize + 2, 4) == "Exif" { return id }
        }
        return nil
    }

    /// The file offset of an item's first extent (construction method 0: file offsets).
    static func itemOffset(_ b: ByteView, iloc: Range<Int>, itemID: Int) -> Int? {
        var at = iloc.lowerBound
        guard let version = b.u8(at), let sizes = b.u8(at + 4), let sizes2 = b.u8(at + 5) else { return nil }
        let offsetSize = Int(sizes >> 4), lengthSize = Int(sizes & 0xF)
        let baseOffsetSize = Int(sizes2 >> 4), indexSize = version >= 1 ? Int(sizes2 & 0xF) : 0
        at += 6
        let itemCount: Int
        if version < 2 { guard let n = b.u16be(at) else { return nil }; itemCount = Int(n); at += 2 }
        else { guard let n = b.u32be(at) else { return nil }; itemCount = Int(n); at += 4 }
        for _ in 0..<min(itemCount, 4096) {
            let id: Int
            if version < 2 { guard let v = b.u16be(at) else { return nil }; id = Int(v); at += 2 }
            else { guard let v = b.u32be(at) else { return nil }; id = Int(v); at += 4 }
            var constructionMethod = 0
            if version >= 1 { guard let v = b.u16be(at) else { return nil }; constructionMethod = Int(v & 0xF); at += 2 }
            at += 2  // data_reference_index
            guard let base = b.uint(at, size: baseOffsetSize) else { return nil }
            at += baseOffsetSize
            guard let extentCount = b.u16be(at) else { return nil }
            at += 2
            var firstOffset: Int?
            for e in 0..<Int(extentCount) {
                at += indexSize
                guard let offset = b.uint(at, size: offsetSize) else { return nil }
                at += offsetSize + lengthSize
                if e == 0 { firstOffset = offset }
            }
            if id == itemID {
                guard constructionMethod == 0, let firstOffset else { return nil }
                return base + firstOffset
            }
        }
        return nil
    }

    // MARK: TIFF: header, IFD0, its ExifIFD pointer (0x8769), then DateTimeOriginal (0x9003).

    static func fromTIFF(_ b: ByteView, at base: Int) -> String? {
        let little: Bool
        switch b.ascii(base, 2) {
        case "II": little = true
        case "MM": little = false
        default: return nil
        }
        guard b.u16(base + 2, little) == 42, let ifd0 = b.u32(base + 4, little) else { return nil }
        guard let exifIFD = findTag(b, base: base, ifd: Int(ifd0), tag: 0x8769, little)?.value else { return nil }
        guard let entry = findTag(b, base: base, ifd: Int(exifIFD), tag: 0x9003, little),
              entry.type == 2, entry.count >= 19 else { return nil }
        let at = entry.count <= 4 ? entry.entryValueAt : base + Int(entry.value)
        guard let text = b.ascii(at, 19) else { return nil }
        return normalise(text)
    }

    struct Entry { var type: UInt16; var count: UInt32; var value: UInt32; var entryValueAt: Int }

    static func findTag(_ b: ByteView, base: Int, ifd: Int, tag: UInt16, _ little: Bool) -> Entry? {
        let at = base + ifd
        guard let n = b.u16(at, little) else { return nil }
        for i in 0..<Int(n) {
            let e = at + 2 + i * 12
            guard let t = b.u16(e, little) else { return nil }
            if t == tag {
                guard let type = b.u16(e + 2, little), let count = b.u32(e + 4, little),
                      let value = b.u32(e + 8, little) else { return nil }
                return Entry(type: type, count: count, value: value, entryValueAt: e + 8)
            }
        }
        return nil
    }

    /// "2015:03:01 12:00:00" → "2015-03-01T12:00:00"; nil for the blank or zero dates
    /// some cameras write ("0000:00:00 00:00:00", spaces).
    static func normalise(_ text: String) -> String? {
        let u = Array(text.utf8)
        guard u.count == 19, u[4] == UInt8(ascii: ":"), u[7] == UInt8(ascii: ":"), u[13] == UInt8(ascii: ":"),
              u[16] == UInt8(ascii: ":") else { return nil }
        let digitPositions = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
        guard digitPositions.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(u[$0]) }) else { return nil }
        guard !text.hasPrefix("0000") else { return nil }
        let date = text.prefix(10).replacingColons()
        return date + "T" + text.suffix(8)
    }
}

private extension Substring {
    func replacingColons() -> String { String(map { $0 == ":" ? "-" : $0 }) }
}

/// Bounds-checked big/little-endian reads over a byte buffer.
struct ByteView {
    let data: UnsafeRawBufferPointer
    init(_ data: UnsafeRawBufferPointer) { self.data = data }
    var count: Int { data.count }

    func u8(_ at: Int) -> UInt8? { at >= 0 && at < data.count ? data[at] : nil }
    func u16be(_ at: Int) -> UInt16? { uint(at, size: 2).map { UInt16($0) } }
    func u32be(_ at: Int) -> UInt32? { uint(at, size: 4).map { UInt32($0) } }
    func u16(_ at: Int, _ little: Bool) -> UInt16? { little ? uintLE(at, size: 2).map { UInt16($0) } : u16be(at) }
    func u32(_ at: Int, _ little: Bool) -> UInt32? { little ? uintLE(at, size: 4).map { UInt32($0) } : u32be(at) }

    /// A big-endian unsigned integer of 0, 4 or 8 bytes (ISO BMFF sizes), or 1/2 bytes.
    func uint(_ at: Int, size: Int) -> Int? {
        guard size >= 0, size <= 8, at >= 0, at + size <= data.count else { return nil }
        var v = 0
        for i in 0..<size { v = (v << 8) | Int(data[at + i]) }
        return v
    }

    func uintLE(_ at: Int, size: Int) -> Int? {
        guard at >= 0, at + size <= data.count else { return nil }
        var v = 0
        for i in (0..<size).reversed() { v = (v << 8) | Int(data[at + i]) }
        return v
    }

    func ascii(_ at: Int, _ length: Int) -> String? {
        guard at >= 0, length >= 0, at + length <= data.count else { return nil }
        return String(decoding: UnsafeRawBufferPointer(rebasing: data[at..<(at + length)]), as: UTF8.self)
    }

    struct Box { var type: String; var body: Range<Int> }

    /// The ISO BMFF boxes laid end to end in `range` (32-bit and 64-bit sizes; a box
    /// running past the buffer is cut to what we have, since we read only a prefix).
    func boxes(in range: Range<Int>) -> [Box] {
        var out: [Box] = []
        var at = range.lowerBound
        while at + 8 <= range.upperBound, out.count < 1024 {
            guard let size32 = u32be(at), let type = ascii(at + 4, 4) else { break }
            var header = 8
            var size = Int(size32)
            if size32 == 1 { guard let big = uint(at + 8, size: 8) else { break }; size = big; header = 16 }
            if size32 == 0 { size = range.upperBound - at }
            guard size >= header else { break }
            let end = min(at + size, range.upperBound)
            out.append(Box(type: type, body: (at + header)..<end))
            at += size
        }
        return out
    }
}
