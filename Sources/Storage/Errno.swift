#if canImport(Glibc)
import Glibc
#endif

/// A POSIX error number with Swift names that still read like the C constants.
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(_ rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's current `errno`.
    public static var current: Errno { Errno(errno) }

    public static let notPermitted = Errno(EPERM)
    public static let noSuchFileOrDirectory = Errno(ENOENT)
    public static let ioError = Errno(EIO)
    public static let badFileDescriptor = Errno(EBADF)
    public static let permissionDenied = Errno(EACCES)
    public static let fileExists = Errno(EEXIST)
    public static let crossDevice = Errno(EXDEV)
    public static let notDirectory = Errno(ENOTDIR)
    public static let isDirectory = Errno(EISDIR)
    public static let invalidArgument = Errno(EINVAL)
    public static let noSpace = Errno(ENOSPC)
    public static let nameTooLong = Errno(ENAMETOOLONG)
    public static let notEmpty = Errno(ENOTEMPTY)
    public static let noData = Errno(ENODATA)
    public static let outOfRange = Errno(ERANGE)
    public static let notSupported = Errno(ENOTSUP)
    public static let tooManyLinks = Errno(EMLINK)
    public static let fileTooLarge = Errno(EFBIG)
    public static let interrupted = Errno(EINTR)
    public static let busy = Errno(EBUSY)
    public static let quotaExceeded = Errno(EDQUOT)

    public var description: String { String(cString: strerror(rawValue)) }

    /// Lets `catch Errno.noSuchFileOrDirectory` match a thrown `Errno`.
    public static func ~= (pattern: Errno, error: any Error) -> Bool {
        (error as? Errno) == pattern
    }
}
