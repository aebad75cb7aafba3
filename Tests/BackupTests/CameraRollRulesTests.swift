import Foundation
import Testing
@testable import Backup

/// Which files the camera backup takes (Docs/operations.md, "What the camera backup takes"):
/// the one rule of what is in the Camera Roll. The drive knows none of it; the backup's
/// follower of the drive's changes asks it of every file committed or renamed.
@Suite(.tags(.logic)) struct CameraRollTypeTests {
    @Test(arguments: [
        "Camera Roll/IMG_0001.jpg", "Camera Roll/IMG_0001.JPG", "Camera Roll/2024/07/IMG_0100.HEIC",
        "Camera Roll/DSC_1999.jpeg", "Camera Roll/screenshot.png", "Camera Roll/RAW/_DSC1234.NEF",
        "Camera Roll/RAW/IMG_1.CR3", "Camera Roll/RAW/IMG_1.dng", "Camera Roll/anim.gif", "Camera Roll/x.webp",
        "Camera Roll/x.avif", "Camera Roll/scan.tiff",
        "Camera Roll/IMG_0002.MOV", "Camera Roll/VID_20240101.mp4", "Camera Roll/GX010001.MP4",
        "Camera Roll/00001.MTS", "Camera Roll/clip.3gp", "Camera Roll/clip.mkv",
        "Camera Roll/IMG_0001.AAE", "Camera Roll/IMG_0001.jpg.xmp", "Camera Roll/_DSC1234.xmp",
        "Camera Roll/😀 été.jpg", "Camera Roll/Trip/Day 1/IMG_1.HEIC",
    ])
    func takesPhotosVideosAndSidecars(_ path: String) {
        #expect(CameraRollRules.isInCameraRoll(path))
    }

    @Test(arguments: [
        "Camera Roll/README.md", "Camera Roll/notes.txt", "Camera Roll/.DS_Store", "Camera Roll/Thumbs.db",
        "Camera Roll/desktop.ini", "Camera Roll/IMG_3", "Camera Roll/album.pdf", "Camera Roll/photos.zip",
        "Camera Roll/jpg", "Camera Roll/.jpg", "Camera Roll/index.html", "Camera Roll/db.sqlite",
        "Camera Roll/IMG_1.jpg.part", "Camera Roll/.IMG_1.jpg.x8Yz1Q", "Camera Roll/.staging/IMG_1.jpg",
        "Camera Roll/IMG_1.jpg~", "Camera Roll", "Documents/IMG_1.jpg", "Camera Rollers/IMG_1.jpg",
        // Only the folder at the root, by its exact name.
        "Docs/Camera Roll/IMG_1.jpg", "camera roll/IMG_1.jpg", "Camera Roll.jpg",
    ])
    func leavesEverythingElse(_ path: String) {
        #expect(!CameraRollRules.isInCameraRoll(path))
    }

    @Test func kindsByName() {
        #expect(CameraRollRules.kind(ofName: "IMG_1.HEIC") == .photo)
        #expect(CameraRollRules.kind(ofName: "IMG_1.mov") == .video)
        #expect(CameraRollRules.kind(ofName: "IMG_1.aae") == .sidecar)
        #expect(CameraRollRules.kind(ofName: "IMG_1.XMP") == .sidecar)
        #expect(CameraRollRules.kind(ofName: "README.md") == nil)
        #expect(CameraRollRules.kind(ofName: "heic") == nil)
        #expect(CameraRollRules.kind(ofName: "archive.jpg.zip") == nil)
        // No extension is in two lists.
        #expect(CameraRollRules.photoExtensions.isDisjoint(with: CameraRollRules.videoExtensions))
        #expect(CameraRollRules.photoExtensions.isDisjoint(with: CameraRollRules.sidecarExtensions))
        #expect(CameraRollRules.videoExtensions.isDisjoint(with: CameraRollRules.sidecarExtensions))
        #expect(CameraRollRules.photoExtensions.allSatisfy { $0 == $0.lowercased() })
    }

    @Test func kindsByHeaderOfTheFixtures() throws {
        #expect(CameraRollRules.kind(ofHeader: Array(try Fixtures.bytes("IMG_0001.jpg").prefix(16))) == .photo)
        #expect(CameraRollRules.kind(ofHeader: Array(try Fixtures.bytes("IMG_0100.heic").prefix(16))) == .photo)
        #expect(CameraRollRules.kind(ofHeader: Array(try Fixtures.bytes("screenshot.png").prefix(16))) == .photo)
        #expect(CameraRollRules.kind(ofHeader: Array(try Fixtures.bytes("README.md").prefix(16))) == nil)
    }

    @Test func kindsByHeader() {
        func h(_ s: String, pad: Int = 16) -> [UInt8] { Array(s.utf8) + [UInt8](repeating: 0, count: pad) }
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x20] + h("ftypqt  ")) == .video)       // QuickTime .mov
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x18] + h("ftypisom")) == .video)       // MP4
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x18] + h("ftypmp42")) == .video)
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x18] + h("ftyp3gp5")) == .video)
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x1C] + h("ftypavif")) == .photo)
        #expect(CameraRollRules.kind(ofHeader: [0, 0, 0, 0x18] + h("ftypcrx ")) == .photo)       // Canon CR3
        #expect(CameraRollRules.kind(ofHeader: h("RIFF\u{0}\u{0}\u{0}\u{0}WEBPVP8 ")) == .photo)
        #expect(CameraRollRules.kind(ofHeader: h("RIFF\u{0}\u{0}\u{0}\u{0}AVI LIST")) == .video)
        #expect(CameraRollRules.kind(ofHeader: [0x49, 0x49, 0x2A, 0x00, 8, 0, 0, 0] + h("")) == .photo)   // TIFF, DNG, NEF
        #expect(CameraRollRules.kind(ofHeader: [0x1A, 0x45, 0xDF, 0xA3] + h("")) == .video)     // Matroska
        #expect(CameraRollRules.kind(ofHeader: h("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")) == .sidecar)
        #expect(CameraRollRules.kind(ofHeader: h("<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">")) == .sidecar)
        var ts = [UInt8](repeating: 0, count: 400)
        ts[0] = 0x47; ts[188] = 0x47
        #expect(CameraRollRules.kind(ofHeader: ts) == .video)                                     // MPEG-TS
        #expect(CameraRollRules.kind(ofHeader: h("# Fixtures\n")) == nil)
        #expect(CameraRollRules.kind(ofHeader: h("PK\u{3}\u{4}")) == nil)                        // zip
        #expect(CameraRollRules.kind(ofHeader: []) == nil)
    }
}
