import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Empty staging files ready for a writer, made and taken back off the writer's path.
///
/// Why: a new file on the drive needs a staging file, and creating one is an inode
/// allocation, which on this kind of disk (ext4 without a journal) also steps over
/// every inode freed in the same block group in the last seconds. Taking a staging
/// file back is a `ftruncate` (its content was not stored: kept for reuse) or an
/// `unlink` of its staging name (it is a stored block now, linked into the store).
/// All of that ran on the FUSE thread answering the write or the close, while the
/// writer (`cp`, `tar`) waited; here one background thread does it, on the other
/// core, and the request path only pops or pushes an array entry.
///
/// Crash safety is unchanged: every file in the staging folder is either empty or a
/// second name of a stored block, and the folder is emptied at every mount
/// (`BlobStore.clearStaging`).
final class StagingPool: Sendable {
    typealias Staging = (fd: Int32, path: String)

    private struct State {
        var ready: [Staging] = []
        var returned: [Staging] = []
        var working = false
        /// Set once a writer took a file: only then is the pool kept full (a store that
        /// never writes, like a server's, makes no staging files).
        var inUse = false
    }

    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "vdrive.staging-pool", qos: .userInitiated)
    private let make: @Sendable () throws -> Staging

    /// Refilled up to `target` whenever fewer than `lowWater` are ready.
    static let target = 32
    static let lowWater = 16

    init(make: @escaping @Sendable () throws -> Staging) { self.make = make }

    deinit {
        let s = state.withLock { $0 }
        for f in s.ready + s.returned { close(f.fd) }
    }

    /// An empty staging file: a ready one, else one made now.
    func take() throws -> Staging {
        let taken: Staging? = state.withLock {
            $0.inUse = true
            return $0.ready.popLast()
        }
        kickIfLow()
        if let taken { return taken }
        return try make()
    }

    /// Gives a staging file back: emptied and kept when it holds one link (its content
    /// was not stored), else closed and its staging name removed, in the background.
    func giveBack(_ file: Staging) {
        state.withLock { $0.returned.append(file) }
        kick()
    }

    /// Waits for the background work, then closes every ready file (their names go
    /// with the staging folder's other files, which the caller removes).
    func drain() {
        queue.sync {}
        let s = state.withLock { s -> State in
            defer { s.ready.removeAll(); s.returned.removeAll() }
            return s
        }
        for f in s.ready + s.returned { close(f.fd) }
    }

    private func kickIfLow() {
        if state.withLock({ $0.ready.count < Self.lowWater }) { kick() }
    }

    private func kick() {
        let start = state.withLock { s -> Bool in
            if s.working { return false }
            s.working = true
            return true
        }
        if start { queue.async { [self] in work() } }
    }

    private func work() {
        while true {
            let (returned, wanted) = state.withLock { s -> ([Staging], Int) in
                defer { s.returned.removeAll() }
                let wanted = s.inUse ? max(0, Self.target - s.ready.count - s.returned.count) : 0
                return (s.returned, wanted)
            }
            for f in returned { takeBack(f) }
            var made: [Staging] = []
            for _ in 0..<wanted {
                guard let f = try? make() else { break }   // the writer's own attempt reports the error
                made.append(f)
            }
            let done = state.withLock { s -> Bool in
                s.ready.append(contentsOf: made)
                if s.returned.isEmpty && (made.isEmpty || s.ready.count >= Self.lowWater) {
                    s.working = false
                    return true
                }
                return false
            }
            if done { return }
        }
    }

    private func takeBack(_ f: Staging) {
        var st = stat()
        if fstat(f.fd, &st) == 0, st.st_nlink == 1, ftruncate(f.fd, 0) == 0,
           state.withLock({ s -> Bool in
               guard s.ready.count < Self.target else { return false }
               s.ready.append(f)
               return true
           }) {
            return
        }
        close(f.fd)
        _ = unlink(f.path)
    }
}
