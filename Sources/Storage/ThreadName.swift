import CLinux
import Foundation

/// The name the system shows for the calling thread (`top -H`, `ps -L`, `perf --sort comm`,
/// /proc/PID/task/TID/comm): which of a daemon's threads is busy, without a debugger.
/// Foundation's `Thread.name` is not passed on to the system on Linux. The kernel keeps
/// 15 bytes; longer names are cut.
public enum ThreadName {
    public static func set(_ name: String) {
        _ = vd_name_this_thread(name)
    }
}

extension Thread {
    /// A thread that gives the system its name as it starts (`ThreadName`).
    public convenience init(named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        self.init { ThreadName.set(name); body() }
        self.name = name
        if let stackSize { self.stackSize = stackSize }
    }
}
