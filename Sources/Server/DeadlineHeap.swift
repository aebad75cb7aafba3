/// Deadlines (monotonic milliseconds) of numbered items, earliest first: a binary
/// min-heap, so adding and taking the earliest are O(log n) with thousands held.
/// Entries are never removed from the middle; an item answered before its deadline
/// leaves an entry its owner skips when it comes out (`compact` drops them in bulk).
struct DeadlineHeap {
    struct Entry {
        let deadline: Int64
        let id: UInt64
    }

    private(set) var entries: [Entry] = []

    var count: Int { entries.count }
    var earliest: Int64? { entries.first?.deadline }

    mutating func add(_ id: UInt64, at deadline: Int64) {
        entries.append(Entry(deadline: deadline, id: id))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard entries[child].deadline < entries[parent].deadline else { break }
            entries.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the entries whose deadline is at or before `now`.
    mutating func takeDue(now: Int64) -> [Entry] {
        var due: [Entry] = []
        while let first = entries.first, first.deadline <= now {
            due.append(first)
            let last = entries.removeLast()
            if !entries.isEmpty {
                entries[0] = last
                siftDown(0)
            }
        }
        return due
    }

    /// Keeps only the entries `keep` accepts.
    mutating func compact(_ keep: (Entry) -> Bool) {
        entries = entries.filter(keep)
        for i in stride(from: entries.count / 2 - 1, through: 0, by: -1) { siftDown(i) }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < entries.count, entries[left].deadline < entries[smallest].deadline { smallest = left }
            if right < entries.count, entries[right].deadline < entries[smallest].deadline { smallest = right }
            if smallest == parent { return }
            entries.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
