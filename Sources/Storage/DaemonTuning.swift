import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// Process-wide settings for a long-running daemon that handles large transient
/// buffers (4 MiB blocks, 1 MiB requests) on many threads and holds many descriptors
/// (a staging file per block being written, a reader per block being read).
public enum DaemonTuning {
    /// Buffers of 256 KiB and more are mapped and unmapped on their own (a fixed
    /// threshold: glibc otherwise raises it after the first free of a 4 MiB buffer,
    /// and each thread's arena then keeps such buffers resident), and two arenas serve
    /// all threads. Measured: peak RSS of the mount under fsstress, Docs/benchmarks.md.
    public static func memory() {
        vd_tune_malloc(256 << 10, 2)
    }

    /// Gives the heap's free pages back to the system, after work that allocated much
    /// and kept little (glibc keeps freed heap pages, counted in the RSS, otherwise).
    public static func returnFreedMemory() {
        vd_trim_heap()
    }

    /// The soft limit on open descriptors raised to the hard limit (systemd and most
    /// shells start at 1,024): a random writer touching every block of a big file holds a
    /// staging descriptor per block until it closes the file.
    public static func openFiles() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
