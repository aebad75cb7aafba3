import Foundation
import DeviceWiring
import CLinux
import Drive

/// `vdrive pin PATH…` / `vdrive unpin PATH…`: set or remove `user.vdrive.pin` on files
/// and folders of a mounted drive. A pinned file, and every file below a pinned folder,
/// is kept on this device ("available offline"): the mount fetches what is not here in
/// the background, and the cache bound never makes it online-only (PinnedContent.swift).
enum PinCommand {
    static var pin: Verb { Verb(
        name: "pin", summary: "keep files or folders on this device (available offline)",
        help: """
        Usage: vdrive pin PATH...

        Keeps each PATH (a file or folder on the mounted drive) on this device: its
        content is fetched now, in the background, and is never made online-only by
        the cache bound or optimize storage. A pinned folder's files are pinned too,
        including those added to it later (here or on another device).
        The same as 'setfattr -n user.vdrive.pin -v 1 PATH'; the pin is this device's
        (it is not synced). 'vdrive status' shows what is still online only.

        Exit codes: 0 done, 64 usage, 66 PATH missing or not on a mounted drive,
        77 the drive refused (a generated tree such as Backups/).
        """,
        run: { try run($0, pinning: true) }) }

    static var unpin: Verb { Verb(
        name: "unpin", summary: "let pinned files become online-only again",
        help: """
        Usage: vdrive unpin PATH...

        Removes the pin of each PATH: with optimize storage on, its content may become
        online-only again once the server holds it (it is fetched again when read).
        A file pinned through a folder above it stays pinned: unpin the folder.

        Exit codes: 0 done, 64 usage, 66 PATH missing or not on a mounted drive.
        """,
        run: { try run($0, pinning: false) }) }

    static func run(_ arguments: [String], pinning: Bool) throws -> Int32 {
        let options = try Options(arguments, valued: [], flags: [])
        guard !options.positionals.isEmpty else { throw CLIError.usage("\(pinning ? "pin" : "unpin") needs at least one PATH on the mounted drive") }
        for text in options.positionals {
            let place = WorkspacePath(text)
            guard let path = place.mountedPath else {
                throw CLIError("\(text) is not on a mounted drive; give its path under the mount point (e.g. ~/VirtualDrive/Docs)", code: ExitCode.noInput)
            }
            var st = stat()
            guard lstat(path, &st) == 0 else {
                throw CLIError("\(path): \(String(cString: strerror(errno))); check the path", code: ExitCode.noInput)
            }
            let name = CacheBound.pinAttribute
            if pinning {
                if vd_setxattr(path, name, "1", 1, 0) != 0 {
                    let e = errno
                    throw CLIError("cannot pin \(path): \(String(cString: strerror(e)))" + (e == EPERM || e == EACCES ? " (a generated tree, or not yours)" : ""),
                                   code: e == EPERM || e == EACCES ? ExitCode.noPermission : ExitCode.ioError)
                }
                print("Pinned \(path): it stays on this device" + ((st.st_mode & S_IFMT) == S_IFDIR ? ", with everything in it" : "")
                      + "; what is not here yet is being fetched in the background.")
            } else if vd_removexattr(path, name) != 0 {
                let e = errno
                guard e == ENODATA else { throw CLIError("cannot unpin \(path): \(String(cString: strerror(e)))", code: ExitCode.ioError) }
                if let folder = pinnedAncestor(of: path, mountPoint: place.mountPoint ?? "/") {
                    print("\(path) is not pinned itself; it is kept through \(folder) (vdrive unpin \(folder)).")
                } else {
                    print("\(path) was not pinned.")
                }
            } else {
                print("Unpinned \(path): with optimize storage on, it may become online-only once the server holds it.")
            }
        }
        return ExitCode.ok
    }

    /// The nearest folder above `path` (up to the mount point) carrying the pin.
    static func pinnedAncestor(of path: String, mountPoint: String) -> String? {
        var current = (path as NSString).deletingLastPathComponent
        while current.hasPrefix(mountPoint) {
            if vd_getxattr(current, CacheBound.pinAttribute, nil, 0) >= 0 { return current }
            if current == mountPoint { break }
            current = (current as NSString).deletingLastPathComponent
        }
        return nil
    }
}
