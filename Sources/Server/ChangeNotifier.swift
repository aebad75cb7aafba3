import Foundation
import Storage
import Synchronization

/// The long poll's wake-ups, one per server process: requests held on a feed until it
/// moves or their wait ends.
///
/// Every feed has a *generation*, a counter `changed` raises after a commit that added
/// to the feed (called by the request that committed, and by ChangeListener.swift for
/// the commits of the other processes on the same PostgreSQL). A request reads the
/// generations of the feeds it waits on *before* it reads its page (`seen`); when the
/// page has nothing for it, it is held with them (`wait`). If one moved in between, a
/// commit may be missing from the page, and the request is checked again at once;
/// otherwise it is registered under the same lock that `changed` takes, so a commit
/// after the read always finds it. That is why no wake-up is lost: a commit is either
/// in the page, or its `changed` comes after the read and wakes the request
/// (Docs/architecture.md, "The long poll").
///
/// A request may wait on several feeds at once (the tree's feed carrying a device's
/// cursor in the records' feed): a commit to any of them wakes it, once.
///
/// A woken request is checked again (its page read again) on one of a few threads of
/// its own, never on the thread that called `changed`; a check that still finds nothing
/// (another feed moved, a change the request had already seen) holds it again with its
/// first deadline. Requests woken together share their reads (`Wake.shared`): 5,000
/// devices at the end of the feed cost one read when a record arrives, not 5,000.
/// Deadlines are kept in one heap watched by one thread; a held request costs no thread.
///
/// `@unchecked Sendable`: every stored property but `workers` and `timer` is guarded by
/// `condition`; those two are set once in `init`.
final class ChangeNotifier: @unchecked Sendable {
    /// Reads the request's page again: its reply, or nil to go on waiting. When
    /// `wake.isFinal` (the wait ended) it must return the reply, empty or not.
    typealias Check = @Sendable (Wake) -> HTTPResponse?

    /// The generations of the feeds a request waits on, read before its page.
    struct Seen: Sendable {
        fileprivate let generations: [ChangeFeed: UInt64]
    }

    private struct Waiter {
        let seen: Seen
        let deadline: Int64
        let held: HeldRequest
        let check: Check
    }

    private let condition = NSCondition()
    private var generations: [ChangeFeed: UInt64] = [:]
    private var waiters: [UInt64: Waiter] = [:]
    private var waitingOn: [ChangeFeed: Set<UInt64>] = [:]
    private var deadlines = DeadlineHeap()
    private var nextID: UInt64 = 0
    private var stopped = false
    private var timerEnded = false
    private let workers: WorkerPool

    /// `threads`: how many checks may read the records at once after a wake-up.
    init(threads: Int = 4) {
        workers = WorkerPool(size: threads, name: "vd-wake")
        Thread(named: "vd-poll-timer", stackSize: 1 << 20) { [self] in timerLoop() }.start()
    }

    /// The generations of `feeds` now; read them before reading the page a request may
    /// wait on.
    func seen(_ feeds: ChangeFeed...) -> Seen {
        condition.withLock { Seen(generations: Dictionary(uniqueKeysWithValues: feeds.map { ($0, generations[$0, default: 0]) })) }
    }

    /// A commit added to `feed`: its held requests are checked again.
    func changed(_ feed: ChangeFeed) { changed([feed]) }

    /// Every feed may have moved (the notifications of other processes were out of
    /// reach for a while): every held request is checked again.
    func changedAll() { changed(ChangeFeed.allCases) }

    private func changed(_ feeds: [ChangeFeed]) {
        var woken: [Waiter] = []
        let wake = condition.withLock { () -> Wake in
            for feed in feeds { generations[feed] = generations[feed, default: 0] &+ 1 }
            for feed in feeds {
                for id in waitingOn.removeValue(forKey: feed) ?? [] {
                    if let waiter = take(id) { woken.append(waiter) }
                }
            }
            return Wake(generations: generations, isFinal: false)
        }
        for waiter in woken { dispatch(waiter, wake) }
    }

    /// Removes a held request (it is answered, or checked again); under `condition`.
    private func take(_ id: UInt64) -> Waiter? {
        guard let waiter = waiters.removeValue(forKey: id) else { return nil }
        for feed in waiter.seen.generations.keys { waitingOn[feed]?.remove(id) }
        return waiter
    }

    /// Holds `held` until one of the feeds moves past what `seen` read before the
    /// request's page and `check` answers, or until `deadline` (monotonic milliseconds),
    /// when `check` answers with whatever there is. Does not block: called on the epoll
    /// thread that routed the request.
    func wait(_ seen: Seen, until deadline: Int64, held: HeldRequest, check: @escaping Check) {
        hold(Waiter(seen: seen, deadline: deadline, held: held, check: check))
    }

    private func hold(_ waiter: Waiter) {
        enum Outcome { case held, stopping, moved([ChangeFeed: UInt64]) }
        let outcome = condition.withLock { () -> Outcome in
            if stopped { return .stopping }
            // A commit since the page was read may be missing from it: check now.
            if waiter.seen.generations.contains(where: { generations[$0.key, default: 0] != $0.value }) { return .moved(generations) }
            nextID &+= 1
            waiters[nextID] = waiter
            for feed in waiter.seen.generations.keys { waitingOn[feed, default: []].insert(nextID) }
            deadlines.add(nextID, at: waiter.deadline)
            // Answered requests leave their heap entries behind; drop them in bulk.
            if deadlines.count > 2 * waiters.count + 1024 { deadlines.compact { waiters[$0.id] != nil } }
            if deadlines.earliest == waiter.deadline { condition.broadcast() }
            return .held
        }
        switch outcome {
        case .held: break
        case .stopping: waiter.held.answer(HeldRequest.stopping)
        case .moved(let current): dispatch(waiter, Wake(generations: current, isFinal: false))
        }
    }

    private func dispatch(_ waiter: Waiter, _ wake: Wake) {
        workers.submit { [self] in
            if let reply = waiter.check(wake) {
                waiter.held.answer(reply)
            } else if wake.isFinal {
                waiter.held.answer(.error(500, "internal", "the server found no answer to a poll at the end of its wait; poll again"))
            } else {
                // Nothing new for this request: it waits on, from the wake-up's generations.
                hold(Waiter(seen: wake.seen(waiter.seen), deadline: waiter.deadline, held: waiter.held, check: waiter.check))
            }
        }
    }

    /// Answers the requests whose wait ended, then sleeps until the next deadline (or
    /// until an earlier one is added).
    private func timerLoop() {
        condition.lock()
        while !stopped {
            let now = monotonicMilliseconds()
            let due = deadlines.takeDue(now: now).compactMap { take($0.id) }
            if !due.isEmpty {
                condition.unlock()
                let wake = Wake(generations: [:], isFinal: true)
                for waiter in due { dispatch(waiter, wake) }
                condition.lock()
                continue
            }
            if let earliest = deadlines.earliest {
                _ = condition.wait(until: Date(timeIntervalSinceNow: Double(earliest - now) / 1000))
            } else {
                condition.wait()
            }
        }
        timerEnded = true
        condition.broadcast()
        condition.unlock()
    }

    /// Requests held right now.
    var waitingCount: Int { condition.withLock { waiters.count } }

    /// Ends the timer and the checks; the requests still held are answered 503
    /// (`HeldRequest.stopping`). Idempotent.
    func stop() {
        let left = condition.withLock { () -> [Waiter] in
            stopped = true
            condition.broadcast()
            while !timerEnded { condition.wait() }
            let left = Array(waiters.values)
            waiters.removeAll()
            waitingOn.removeAll()
            deadlines = DeadlineHeap()
            return left
        }
        // Checks already queued run (and answer, or find the notifier stopped).
        workers.stop()
        for waiter in left { waiter.held.answer(HeldRequest.stopping) }
    }
}

/// One wake-up of held requests: the change that woke them (or the end of their wait),
/// and the replies they share. Requests with the same arguments woken together get the
/// same page, so it is read once (`shared`).
final class Wake: Sendable {
    /// Every feed's generation when they were woken: a request that finds nothing new
    /// waits on from them, so a commit after the wake-up wakes it again.
    private let generations: [ChangeFeed: UInt64]
    /// The wait ended: answer with what there is.
    let isFinal: Bool
    private let replies = Mutex<[String: SharedReply]>([:])

    init(generations: [ChangeFeed: UInt64], isFinal: Bool) {
        self.generations = generations; self.isFinal = isFinal
    }

    /// The feeds `seen` names, at their generations of this wake-up.
    func seen(_ seen: ChangeNotifier.Seen) -> ChangeNotifier.Seen {
        ChangeNotifier.Seen(generations: Dictionary(uniqueKeysWithValues: seen.generations.keys.map { ($0, generations[$0, default: 0]) }))
    }

    /// The reply for `key` (the request's arguments), made by the first request of this
    /// wake-up that asks; the others with the same key wait for it and reuse it.
    func shared(_ key: String, _ make: () -> HTTPResponse?) -> HTTPResponse? {
        let entry = replies.withLock { all in
            if let entry = all[key] { return entry }
            let entry = SharedReply()
            all[key] = entry
            return entry
        }
        return entry.value(make)
    }
}

/// A reply made once for several requests.
/// `@unchecked Sendable`: `made` and `reply` are guarded by `lock`.
private final class SharedReply: @unchecked Sendable {
    private let lock = NSLock()
    private var made = false
    private var reply: HTTPResponse?

    func value(_ make: () -> HTTPResponse?) -> HTTPResponse? {
        lock.withLock {
            if !made {
                reply = make()
                made = true
            }
            return reply
        }
    }
}
