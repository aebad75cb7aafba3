import Foundation
import Storage

/// The feed follower: the server's tree changes into `mirror_remote`, page by page, each
/// page with the cursor in one transaction (a kill between pages reads the next again).
extension MirrorEngine {
    func followFeed() {
        var failures = 0
        while !stopping {
            let started = MirrorClock.nanoseconds()
            let connecting = state.withLock { $0.status.connecting }
            do {
                let brought = try pullPage(wait: settings.hold)
                // The server answers the feed (again): its failure is over, and it can be
                // reached. The worker, backing off after its own failures (up to 30 s),
                // goes now, and publishes the status.
                let news = state.withLock { s in
                    defer { s.feedFailure = nil; s.status.offline = false }
                    let news = s.feedFailure != nil || s.status.offline || connecting || failures > 0
                    if news { s.serverSpoke = true }
                    return news
                }
                failures = 0
                if news { wake() }
                if brought { continue }
                // An empty answer that came at once: a server that does not hold requests.
                // Asked again once a second then.
                let elapsed = Double(MirrorClock.nanoseconds() - started) / 1e9
                if elapsed < 1 { sleepUnlessStopping(1 - elapsed) }
            } catch {
                if stopping { break }
                failures += 1
                noteProblem(error, fromFeed: true)
                sleepUnlessStopping(Self.feedRetry(after: failures, unreachable: MirrorLog.isUnreachable(error)))
            }
        }
    }

    /// How long the feed waits before asking again after `failures` failures in a row:
    /// 1, 2, 4, ... s. A server that answered with an error (overloaded, stopping) is left
    /// up to 30 s; one that could not be reached at all is asked at least every 5 s (a
    /// refused connection costs it nothing), so a device is back within 5 s of its server's
    /// return, and its worker with it: changes closed meanwhile are not held for 30 s.
    static func feedRetry(after failures: Int, unreachable: Bool) -> Double {
        min(unreachable ? 5 : 30, 0.5 * Double(1 << min(failures, 6)))
    }

    /// Reads one page from the cursor into the remote table. Returns true when it brought
    /// something (ask again at once: there may be more).
    @discardableResult
    func pullPage(wait: Int) throws -> Bool {
        let db = feedDB
        let cursor = Int64(try MirrorRows.state("cursor", in: db) ?? "0") ?? 0
        let page = try server.page(since: cursor, wait: wait, stop: stopAsked)
        state.withLock { $0.status.connecting = false }
        let known = try MirrorRows.state("workspace", in: db)
        if let workspace = page.workspace, let known, workspace != known {
            throw MirrorRefusal("the server at this address now holds another workspace (\(workspace), this drive mirrors \(known)); nothing is sent or applied: mount it with the right server, or with a new state folder")
        }
        if page.latest < cursor {
            MirrorLog.error("the workspace server's tree ends before what this drive learned (restored from an older copy?): reading it again from the start")
        }
        try write(on: db) {
            if known == nil, let workspace = page.workspace { try MirrorRows.setState("workspace", workspace, in: db) }
            for node in page.nodes {
                if let s = try MirrorRows.synced(node: node.id, in: db), s.node.version >= node.version, s.node.version > 0 { continue }
                try MirrorRows.saveRemote(node, in: db)
            }
            try MirrorRows.setState("cursor", String(page.latest < cursor ? 0 : page.next), in: db)
        }
        if !page.nodes.isEmpty {
            state.withLock { $0.serverSpoke = true }
            wake()
        }
        return !page.nodes.isEmpty
    }
}
