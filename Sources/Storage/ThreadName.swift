import CLinux
import Foundation

extension Thread {
    /// A thread that gives the system its name as it starts, as `top -H`, `ps -L`,
    /// `perf --sort comm` and /proc/PID/task/TID/comm show it: which of a daemon's threads
    /// is busy, without a debugger. Foundation's `name` alone is not passed on to the system
    /// on Linux. The kernel keeps 15 bytes; a longer name is cut.
    public convenience init(named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        self.init { _ = vd_name_this_thread(name); body() }
        self.name = name
        if let stackSize { self.stackSize = stackSize }
    }
}
