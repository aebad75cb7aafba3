import Foundation
import Storage

/// Setuid, setgid and file capabilities go when a file changes, as on any Linux file
/// system. The kernel leaves this to the drive: the mount negotiates
/// FUSE_HANDLE_KILLPRIV_V2 (Sources/CFuseIO/fuse_io.c), which spares every small file
/// two requests (the kernel's `security.capability` lookup before each write, and an
/// attribute refresh before each chown).
///
/// The rules are the kernel's (`setattr_should_drop_suidgid`, `file_remove_privs`):
/// - a write or truncate by a caller without CAP_FSETID clears setuid, and setgid when
///   the group may execute (setgid without group execute is mandatory locking, kept);
/// - a change of owner or group of anything but a directory clears them whoever asks;
/// - both remove the file's `security.capability`.
/// CAP_FSETID is read as "the caller is root": FUSE tells the uid, not capabilities.
enum Privileges {
    /// The mode bits (`& 0o7777`) after such a change, or nil when they stay.
    static func modeAfterChange(_ mode: UInt32, ownerChanged: Bool, callerUid: UInt32) -> UInt32? {
        if !ownerChanged && callerUid == 0 { return nil }
        var m = mode & 0o7777
        m &= ~UInt32(S_ISUID)
        if m & UInt32(S_IXGRP) != 0 { m &= ~UInt32(S_ISGID) }
        return m == mode & 0o7777 ? nil : m
    }

    static let capabilityAttribute = "security.capability"
}

extension DriveFileSystem {
    /// Before a write or truncate of an open node's draft (under the node's lock): the
    /// cleared mode waits in the draft with the content it came with, like a chmod would.
    func dropPrivilegesForChange(_ d: Draft, ino: UInt64, callerUid: UInt32) throws {
        let stored = try catalog.attributes(ino)
        let mode = d.attributes.mode ?? stored.mode
        if let cleared = Privileges.modeAfterChange(mode, ownerChanged: false, callerUid: callerUid) {
            d.attributes.mode = cleared
            d.ctime = nowNanoseconds()
        }
        try removeCapability(ino)
    }

    /// For a setattr that changes the owner or group: the mode to set with it, if the
    /// change clears bits (an explicit mode in the same request wins).
    func modeForOwnerChange(_ current: NodeAttributes, _ changes: AttributeChanges) throws -> UInt32? {
        guard changes.uid != nil || changes.gid != nil, changes.mode == nil, !current.isDirectory else { return nil }
        try removeCapability(current.ino)
        return Privileges.modeAfterChange(current.mode, ownerChanged: true, callerUid: 0)
    }

    /// Almost no file has one: the catalog answers from memory for the others.
    private func removeCapability(_ ino: UInt64) throws {
        guard try catalog.mayHaveSecurityAttributes(ino) else { return }
        do { try removexattr(ino, name: Privileges.capabilityAttribute) } catch let e as Errno where e == .noData {}
    }
}
