import Testing
import TestTraits
import Foundation
import Synchronization
import Storage

@Suite(.tags(.logic)) struct ThreadNameTests {
    /// What the kernel shows for the calling thread.
    static func systemName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?").trimmingCharacters(in: .newlines)
    }

    @Test func aNamedThreadShowsItsNameToTheSystem() throws {
        let seen = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        Thread(named: "vd-test") { seen.withLock { $0.append(Self.systemName()) }; done.signal() }.start()
        // Longer than the kernel's 15 bytes: cut, not refused (refused, the thread kept its parent's name).
        Thread(named: "vd-a-name-longer-than-fifteen") { seen.withLock { $0.append(Self.systemName()) }; done.signal() }.start()
        #expect(done.wait(timeout: .now() + 10) == .success && done.wait(timeout: .now() + 10) == .success)
        #expect(Set(seen.withLock { $0 }) == ["vd-test", "vd-a-name-longe"])
    }
}
