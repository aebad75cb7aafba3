import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Why this machine cannot make the tests' FUSE mounts, or nil when it can: they mount
/// as root (`allow_other`, `fusermount3 -u` of a mount another process made), through
/// /dev/fuse.
public let cannotMountReason: String? = {
    guard geteuid() == 0 else { return "the FUSE mount tests need root (run Tests/run as root)" }
    let fd = open("/dev/fuse", O_RDWR)
    guard fd >= 0 else {
        return "the FUSE mount tests need /dev/fuse (open: \(String(cString: strerror(errno)))); in a container, pass --device /dev/fuse --cap-add SYS_ADMIN"
    }
    close(fd)
    guard access("/bin/fusermount3", X_OK) == 0 else { return "the FUSE mount tests need /bin/fusermount3 (apt-get install fuse3)" }
    return nil
}()

extension Trait where Self == ConditionTrait {
    /// Skips a suite or test that mounts the drive when this machine cannot, saying why,
    /// instead of failing in `MountedDrive.start`.
    public static var needsMount: Self {
        .enabled(if: cannotMountReason == nil, Comment(rawValue: cannotMountReason ?? "FUSE mounts work here"))
    }
}
