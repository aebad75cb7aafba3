import Foundation
import Backup
import Client
import Crypto
import Drive

/// The drive's `RemoteContent` over the workspace client: block ranges and chunk lists
/// from the configured server, with short timeouts (a read waits at most about
/// `lowSpeedSeconds` on a server that stopped answering, `connect` on one that is gone).
/// Non-interactive fetches (prefetch) wait while `TransferHold` says so (paused, metered,
/// battery low); a user's read always goes.
final class ServerBlocks: RemoteContent {
    /// 2 s to connect (loopback or LAN answers in milliseconds; a dead host is not worth
    /// more of a reader's time), abandoned below 1 KiB/s for 5 s.
    static let timeouts = Timeouts(connect: 2, lowSpeedBytes: 1024, lowSpeedSeconds: 5)

    private let client: WorkspaceClient
    private let transfers: TransferHold

    init(client: WorkspaceClient, transfers: TransferHold) {
        self.client = client
        self.transfers = transfers
    }

    func blockBytes(_ hash: SHA256Digest, offset: Int, length: Int, interactive: Bool) throws(RemoteFailure) -> [UInt8] {
        if !interactive, let why = transfers.reason() { throw .held(why) }
        do { return try client.blockBytes(hash, offset: offset, length: length) } catch { throw Self.failure(error) }
    }

    func wholeBlock(_ hash: SHA256Digest, into fd: Int32?, direct: Int32?, interactive: Bool,
                    piece: (UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) -> Int {
        if !interactive, let why = transfers.reason() { throw .held(why) }
        do { return Int(try client.streamBlock(hash, to: fd, direct: direct, piece: piece)) } catch { throw Self.failure(error) }
    }

    func wholeBlocks(_ hashes: [SHA256Digest], interactive: Bool,
                     each: (SHA256Digest, UnsafeRawBufferPointer) -> Void) throws(RemoteFailure) {
        if !interactive, let why = transfers.reason() { throw .held(why) }
        // Unhashed here: the drive checks every block it is handed (RemoteContent).
        do { try client.fetchBlockPack(hashes, checked: false) { each($0, $1) } } catch let error as ClientError { throw Self.failure(error) } catch {
            throw .refused("\(error)")
        }
    }

    func chunkDigests(_ hash: SHA256Digest) throws(RemoteFailure) -> [SHA256Digest] {
        do { return try client.chunkDigests(hash) } catch { throw Self.failure(error) }
    }

    func presentContents(_ contents: [SHA256Digest]) throws(RemoteFailure) -> Set<SHA256Digest> {
        do { return try client.presentContents(contents) } catch { throw Self.failure(error) }
    }

    static func failure(_ error: ClientError) -> RemoteFailure {
        switch error {
        case .notFound: return .missing("the server answered 404")
        case .unreachable, .timedOut, .insecure: return .unavailable(error.description)
        case .http(let status, _) where status >= 500 || status == 408 || status == 429: return .unavailable(error.description)
        default: return .refused(error.description)
        }
    }
}
