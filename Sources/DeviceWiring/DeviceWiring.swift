/// DeviceWiring: the pieces that join the drive, the backup, the mirror and the client on
/// one device. The `vdrive` executable is the command line over it; tests import it.
///
/// Terms:
/// - a *wiring* (`BackupWiring`, `BackupsWiring`, `MirrorWiring`, `ResidencyWiring`) builds
///   one piece for a drive, starts it once the mount serves and stops it after the
///   unmount; `DeviceMount` puts them together;
/// - an *adapter* (`ClientTransport`, `ClientMirrorServer`, `ClientRemoteRecords`,
///   `ServerBlocks`) implements, over `WorkspaceClient`, a protocol its consumer owns
///   (Backup's `BackupTransport`, the mirror's `MirrorServer`, Drive's `RemoteRecords`
///   and `RemoteContent`): the one place where the wire's outcomes become that consumer's;
/// - the *remote* (`RemoteConfig`) is the server and token this device uses; nil when
///   none is configured, and each piece then waits and says why;
/// - the *pins* (`WiringSchema`) are the backup's references on the drive's blocks: a
///   version's blocks stay while its backup is not done.
///
/// Thread safety: the wirings are built, started and stopped on the mount's thread. What
/// they hand to the drive, the engine or the mirror is called on those threads, and
/// either guards its own state (`Mutex`, `Atomic`, a lock, a `BackgroundThread`'s
/// condition) or sets it before the mount serves and only reads it after.
///
/// Imports: Drive, Storage, Backup, WorkspaceMirror, Client, HTTPClient, Protocol, Crypto.
/// Never Server; the command line's options and what a command prints stay in the
/// executable.
enum DeviceWiringOverview {}
