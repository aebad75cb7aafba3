/// Backup: the camera-roll backup engine.
///
/// Terms:
/// - an *item* is one camera-roll commit (change sequence, path, content hash, size,
///   mtime) queued by the drive inside its commit transaction (`BackupQueue.enqueue`);
/// - its *state* is pending → uploading → done | failed (Docs/backup.md draws it);
/// - an item is *linked* when the server already had its content and nothing was sent;
/// - the *cursor* is the highest change sequence at or below which every item is done;
/// - a *hold* is a policy that keeps bytes from being sent (paused, metered, battery).
///
/// Thread safety: the queue functions take a `Database` that their caller owns for the
/// duration of the call (the drive's connection inside its transaction, or the engine's
/// own connection on the engine's thread). `BackupEngine` runs on one thread of its own
/// and is driven from any thread through `wake()`, `stop()` and `status()`.
///
/// Imports: Storage (SQLite, blobs, file I/O), Crypto (SHA-256), Foundation (JSON,
/// Thread, Process for nmcli). Never HTTP or FUSE: the server is reached through the
/// `BackupTransport` protocol, the drive reaches us through `BackupQueue` and `BackupEngine`.
public enum BackupOverview {}
