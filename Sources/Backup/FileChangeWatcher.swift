import Foundation
import Storage
#if canImport(Glibc)
import Glibc
#endif

/// Calls `onChange` when a file is written, renamed into place or removed: the engine
/// watches the settings file (so `vdrive pause` in another process bites within one
/// progress tick), `vdrive status --watch` watches status.json. One thread sleeps in
/// `poll` on an inotify descriptor and a stop pipe: no CPU while nothing happens.
/// The folder is watched, not the file: `AtomicFile` replaces the file by rename.
public final class FileChangeWatcher: Sendable {
    private let inotifyFd: Int32
    private let stopPipe: (read: Int32, write: Int32)
    private let fileName: String
    private let onChange: @Sendable () -> Void
    private let finished = DispatchSemaphore(value: 0)

    public init(path: String, onChange: @escaping @Sendable () -> Void) throws {
        let folder = (path as NSString).deletingLastPathComponent
        try FileIO.makeDirectories(folder)
        fileName = (path as NSString).lastPathComponent
        self.onChange = onChange
        let fd = inotify_init1(Int32(IN_CLOEXEC))
        guard fd >= 0 else { throw Errno.current }
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM)
        guard inotify_add_watch(fd, folder, mask) >= 0 else {
            let error = Errno.current
            Glibc.close(fd)
            throw error
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            let error = Errno.current
            Glibc.close(fd)
            throw error
        }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        inotifyFd = fd
        stopPipe = (fds[0], fds[1])
        Thread(named: "vd-watch-\(fileName)") { [self] in run() }.start()
    }

    private func run() {
        defer { finished.signal() }
        let bufferSize = 16 * 1024
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferSize, alignment: 8)
        defer { buffer.deallocate() }
        while true {
            var fds = [pollfd(fd: inotifyFd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 2, -1)
            if n < 0 { if errno == EINTR { continue } else { return } }
            if fds[1].revents != 0 { return }
            guard fds[0].revents & Int16(POLLIN) != 0 else { continue }
            let length = read(inotifyFd, buffer, bufferSize)
            if length <= 0 { continue }
            if touchesWatchedFile(buffer, length) { onChange() }
        }
    }

    private func touchesWatchedFile(_ buffer: UnsafeMutableRawPointer, _ length: Int) -> Bool {
        var offset = 0
        let headerSize = MemoryLayout<inotify_event>.size
        while offset + headerSize <= length {
            let event = buffer.load(fromByteOffset: offset, as: inotify_event.self)
            let nameLength = Int(event.len)
            if nameLength > 0 {
                let name = String(cString: (buffer + offset + headerSize).assumingMemoryBound(to: CChar.self))
                if name == fileName { return true }
            }
            offset += headerSize + nameLength
        }
        return false
    }

    /// Stops the thread and waits for it (it wakes at once: the stop pipe is in its poll).
    public func stop() {
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        finished.wait()
        Glibc.close(inotifyFd)
        Glibc.close(stopPipe.read)
        Glibc.close(stopPipe.write)
    }
}
