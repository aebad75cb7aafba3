/// Backup: the camera-roll backup engine.
///
/// Terms:
/// - an *item* is one camera-roll commit (change sequence, path, content hash, size,
///   mtime, block list) queued by the drive inside its commit transaction
///   (`BackupQueue.enqueue`); it is *settled* once no writable handle is left on the
///   file (`BackupQueue.settle`), and only a settled item is sent;
/// - its *state* is pending → uploading → done | failed (Docs/backup.md draws it);
/// - content travels in 4 MiB *blocks* named by their SHA-256 (Crypto's `Blocks`); the
///   server's *plan* lists the blocks it lacks, and a zero block is never sent;
/// - an item is *linked* when the server already had its content and nothing was sent;
/// - the *cursor* is the highest change sequence at or below which every item is done;
/// - a *hold* is a policy that keeps bytes from being sent (paused, metered, battery).
///
/// Thread safety: the queue functions take a `Database` that their caller owns for the
/// duration of the call (the drive's connection inside its transaction, or the engine's
/// own connection on the engine's thread). `BackupEngine` runs on one thread of its own
/// and is driven from any thread through `wake()`, `stop()` and `status()`; its
/// uploader's sender threads (`SenderPool`) only read block files and call the
/// transport, never the database.
///
/// Imports: Storage (SQLite, block store, file I/O), Crypto (SHA-256, blocks), Foundation (JSON,
/// Thread, Process for nmcli). Never HTTP or FUSE: the server is reached through the
/// `BackupTransport` protocol, the drive reaches us through `BackupQueue` and `BackupEngine`.
public enum BackupOverview {}
