import CLinux

/// Process-wide allocator settings for a long-running daemon that handles large
/// transient buffers (4 MiB blocks, 1 MiB requests) on many threads.
public enum MemoryTuning {
    /// Buffers of 256 KiB and more are mapped and unmapped on their own (a fixed
    /// threshold: glibc otherwise raises it after the first free of a 4 MiB buffer,
    /// and each thread's arena then keeps such buffers resident), and two arenas serve
    /// all threads. Measured: peak RSS of the mount under fsstress, Docs/benchmarks.md.
    public static func forDaemon() {
        vd_tune_malloc(256 << 10, 2)
    }
}
