import Foundation

/// The model-based test of the synced workspace, part one: what the devices do, as a
/// pure function of a seed. The whole schedule (every operation, its device, its path,
/// its content's length, the pause after it, every unmount, server restart and kill) is
/// made before anything runs, so a seed replays the same sequence; only the timing of
/// the mounts and the server differs between two runs.
///
/// Paths come from a small pool of names (three folder names, four file names, at
/// most three levels deep), so devices keep colliding: two create one path, one edits
/// what another renames, moves or deletes, a folder is moved into another that is
/// being moved elsewhere. Names are never temporary ones (`*.swp`, `*~`, …): those stay
/// on their device by design (Docs/sync.md, "What is in the workspace"), and the trees
/// are compared whole.
public enum MirrorModelOp: Sendable, CustomStringConvertible {
    /// A new file (`O_CREAT | O_EXCL`) of `length` bytes.
    case create(String, length: Int)
    /// A file's content replaced, the file made if missing (`O_CREAT | O_TRUNC`).
    case write(String, length: Int)
    /// Bytes added at the end (`O_APPEND`).
    case append(String, length: Int)
    /// Cut to at most `length` bytes (`ftruncate` on an open handle).
    case truncate(String, length: Int)
    /// `rename(2)`: a rename in the same folder, or a move to another (files and folders).
    case rename(String, String)
    case mkdir(String)
    case rmdir(String)
    /// `unlink(2)` of a file or a symlink.
    case unlink(String)
    /// `rm -r`: a folder and everything in it, children first.
    case removeTree(String)
    /// The executable bit flipped (files only: `chmod` follows symlinks).
    case chmodX(String)
    case symlink(String, target: String)

    public var description: String {
        switch self {
        case .create(let p, let n): return "create \(p) (\(n) B)"
        case .write(let p, let n): return "write \(p) (\(n) B)"
        case .append(let p, let n): return "append \(p) (+\(n) B)"
        case .truncate(let p, let n): return "truncate \(p) to \(n) B"
        case .rename(let a, let b): return "rename \(a) -> \(b)"
        case .mkdir(let p): return "mkdir \(p)"
        case .rmdir(let p): return "rmdir \(p)"
        case .unlink(let p): return "unlink \(p)"
        case .removeTree(let p): return "rm -r \(p)"
        case .chmodX(let p): return "chmod ±x \(p)"
        case .symlink(let p, let t): return "symlink \(p) -> \(t)"
        }
    }

    /// Whether the operation closes a new content (a version the test may require).
    var writesContent: Bool {
        switch self {
        case .create, .write, .append, .truncate: return true
        default: return false
        }
    }
}

/// One step of a schedule.
public enum MirrorModelStep: Sendable, CustomStringConvertible {
    /// An operation on a mounted device, then a pause (seconds) before the next step.
    case op(device: Int, MirrorModelOp, pause: Double)
    /// Every device idle this long (seconds): settled changes go up.
    case rest(Double)
    /// A device unmounted (cleanly) …
    case away(Int)
    /// … and mounted again.
    case back(Int)
    /// The server stopped (SIGTERM) …
    case serverDown
    /// … and started again on the same port.
    case serverUp
    /// A device unmounted and mounted again in the foreground, as a child process …
    case foreground(Int)
    /// … killed with SIGKILL, then mounted again in the background.
    case kill(Int)

    public var description: String {
        switch self {
        case .op(let d, let op, let pause): return "d\(d) \(op)" + (pause > 0 ? String(format: " · pause %.2f s", pause) : "")
        case .rest(let s): return String(format: "rest %.1f s", s)
        case .away(let d): return "unmount d\(d)"
        case .back(let d): return "mount d\(d)"
        case .serverDown: return "server stop"
        case .serverUp: return "server start"
        case .foreground(let d): return "remount d\(d) in the foreground"
        case .kill(let d): return "kill -9 d\(d), mount again"
        }
    }
}

/// What a run does: seed, size, and the timings the version rule depends on.
public struct MirrorModelOptions: Sendable {
    public var seed: UInt64
    /// Operations across all devices.
    public var operations: Int
    public var devices: Int
    /// How long a device must stay idle, mounted, with the server up, after closing a
    /// content for the test to require that content to be kept (the mirror sends a change
    /// after 0.2 s of quiet: this is fifteen times that, for a loaded machine).
    public var quietStretch: Double = 3
    /// How long after the server starts again a device may still be away from it: its
    /// feed asks a server it cannot reach at most 5 s apart (`MirrorEngine.feedRetry`),
    /// and a content closed before it is back goes up once it is, unless replaced first.
    public var reconnect: Double = 6
    /// The longest pause after an operation (most are much shorter).
    public var maxPause: Double = 0.25
    /// The deadline for every tree to be the same at the end.
    public var convergence: Double = 180

    public init(seed: UInt64, operations: Int, devices: Int) {
        self.seed = seed
        self.operations = operations
        self.devices = devices
    }

    /// `VDRIVE_MIRROR_SEED` (a replay) and `VDRIVE_MIRROR_OPS` (the count), else a fresh
    /// seed and `operations`.
    public static func fromEnvironment(operations: Int, devices: Int) -> MirrorModelOptions {
        let env = ProcessInfo.processInfo.environment
        let seed = env["VDRIVE_MIRROR_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let count = env["VDRIVE_MIRROR_OPS"].flatMap { Int($0) }.flatMap { $0 > 0 ? $0 : nil } ?? operations
        return MirrorModelOptions(seed: seed, operations: count, devices: devices)
    }
}

public enum MirrorModelSchedule {
    static let folders = ["A", "B", "C"]
    static let files = ["a.txt", "b.txt", "c.md", "d"]
    static let targets = ["a.txt", "../b.txt", "A/c.md", "missing"]

    /// The schedule of `options`: `operations` operations, rests every 40 to 60 of them,
    /// and at least one unmount, one server restart and one kill -9 each per 250
    /// operations, never two of them at once.
    public static func make(_ options: MirrorModelOptions) -> [MirrorModelStep] {
        var rng = SeededGenerator(seed: options.seed)
        let n = options.operations
        let devices = max(1, options.devices)

        // Disruptions first: kind and the operation index it starts at, and how many
        // operations it lasts; spread over 5 %…90 % of the run, not overlapping.
        enum Disruption { case away, server, kill }
        let each = max(1, n / 250)
        var planned: [(at: Int, kind: Disruption, length: Int)] = []
        for kind in [Disruption.away, .server, .kill] {
            for _ in 0..<each {
                for _ in 0..<50 {
                    let at = Int.random(in: (n / 20)...max(n / 20, n * 9 / 10), using: &rng)
                    let length = Int.random(in: 4...14, using: &rng)
                    if planned.allSatisfy({ at + length + 2 < $0.at || $0.at + $0.length + 2 < at }) {
                        planned.append((at, kind, length))
                        break
                    }
                }
            }
        }
        planned.sort { $0.at < $1.at }

        var steps: [MirrorModelStep] = []
        var mounted = Array(repeating: true, count: devices)
        var serverUp = true
        var ending: [(at: Int, step: MirrorModelStep)] = []
        var nextRest = Int.random(in: 40...60, using: &rng)
        var idle: Int? = nil

        for i in 0..<n {
            // Phases of 25 operations; in some, one device does nothing (it idles long
            // enough for its last content to go up while the others go on).
            if i % 25 == 0 { idle = devices > 1 && Int.random(in: 0..<10, using: &rng) < 4 ? Int.random(in: 0..<devices, using: &rng) : nil }
            while let e = ending.first, e.at <= i {
                ending.removeFirst()
                steps.append(e.step)
                switch e.step {
                case .back(let d), .kill(let d): mounted[d] = true
                case .serverUp: serverUp = true
                default: break
                }
            }
            if let p = planned.first, p.at <= i {
                planned.removeFirst()
                let d = Int.random(in: 0..<devices, using: &rng)
                switch p.kind {
                case .away:
                    steps.append(.away(d)); mounted[d] = false
                    ending.append((i + p.length, .back(d)))
                case .server:
                    steps.append(.serverDown); serverUp = false
                    ending.append((i + p.length, .serverUp))
                case .kill:
                    steps.append(.foreground(d))
                    ending.append((i + p.length, .kill(d)))
                }
            }
            if i == nextRest {
                steps.append(.rest(options.quietStretch + 0.5))
                nextRest = i + Int.random(in: 40...60, using: &rng)
            }
            let candidates = (0..<devices).filter { mounted[$0] && $0 != idle }
            let d = candidates.isEmpty ? (0..<devices).first { mounted[$0] } ?? 0 : candidates[Int.random(in: 0..<candidates.count, using: &rng)]
            let op = operation(serverUp: serverUp, &rng)
            let u = Double.random(in: 0..<1, using: &rng)
            steps.append(.op(device: d, op, pause: u * u * options.maxPause))
        }
        for e in ending { steps.append(e.step) }
        return steps
    }

    private static func pick<T>(_ list: [T], _ rng: inout SeededGenerator) -> T { list[Int.random(in: 0..<list.count, using: &rng)] }

    private static func join(_ dir: String, _ name: String) -> String { dir.isEmpty ? name : dir + "/" + name }

    /// A folder path of 0 to `most` levels.
    private static func folder(most: Int, _ rng: inout SeededGenerator) -> String {
        let u = Int.random(in: 0..<20, using: &rng)
        let depth = min(most, u < 11 ? 0 : u < 18 ? 1 : 2)
        return (0..<depth).map { _ in pick(folders, &rng) }.joined(separator: "/")
    }

    private static func filePath(_ rng: inout SeededGenerator) -> String { join(folder(most: 2, &rng), pick(files, &rng)) }
    private static func folderPath(_ rng: inout SeededGenerator) -> String { join(folder(most: 1, &rng), pick(folders, &rng)) }

    /// A content length: mostly small, sometimes a few hundred KiB, rarely more than a
    /// block (4 MiB), so a content of two blocks goes up and comes down too.
    private static func length(_ rng: inout SeededGenerator) -> Int {
        let u = Int.random(in: 0..<100, using: &rng)
        if u < 80 { return Int.random(in: 1...2_000, using: &rng) }
        if u < 98 { return Int.random(in: 2_000...300_000, using: &rng) }
        return Int.random(in: (4 << 20) + 1...(4 << 20) + 400_000, using: &rng)
    }

    /// One operation. Appends and truncations read the file back through their handle
    /// (the content they closed): only while the server is up, since a content that
    /// came from another device may be on the server only.
    private static func operation(serverUp: Bool, _ rng: inout SeededGenerator) -> MirrorModelOp {
        let weights: [(Int, Int)] = [(0, 10), (1, 18), (2, serverUp ? 8 : 0), (3, serverUp ? 5 : 0), (4, 10), (5, 8), (6, 7),
                                     (7, 3), (8, 5), (9, 3), (10, 5), (11, 4)]
        var u = Int.random(in: 0..<weights.reduce(0) { $0 + $1.1 }, using: &rng)
        var kind = 0
        for (k, w) in weights { if u < w { kind = k; break }; u -= w }
        switch kind {
        case 0: return .create(filePath(&rng), length: length(&rng))
        case 1: return .write(filePath(&rng), length: length(&rng))
        case 2: return .append(filePath(&rng), length: Int.random(in: 1...3_000, using: &rng))
        case 3: return .truncate(filePath(&rng), length: Int.random(in: 0...1_500, using: &rng))
        case 4:
            // A rename in place: a file to another file name, a folder to another folder name.
            if Bool.random(using: &rng) {
                let dir = folder(most: 2, &rng)
                return .rename(join(dir, pick(files, &rng)), join(dir, pick(files, &rng)))
            }
            let dir = folder(most: 1, &rng)
            return .rename(join(dir, pick(folders, &rng)), join(dir, pick(folders, &rng)))
        case 5:
            // A move to another folder, mostly under the same name.
            let file = Bool.random(using: &rng)
            let from = file ? filePath(&rng) : folderPath(&rng)
            let name = Int.random(in: 0..<10, using: &rng) < 7 ? String(from.split(separator: "/").last!)
                : file ? pick(files, &rng) : pick(folders, &rng)
            return .rename(from, join(folder(most: file ? 2 : 1, &rng), name))
        case 6: return .mkdir(folderPath(&rng))
        case 7: return .rmdir(folderPath(&rng))
        case 8: return .unlink(filePath(&rng))
        case 9: return .removeTree(folderPath(&rng))
        case 10: return .chmodX(filePath(&rng))
        default: return .symlink(filePath(&rng), target: pick(targets, &rng))
        }
    }
}
