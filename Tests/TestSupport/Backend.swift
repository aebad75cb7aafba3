/// The two back ends a device reads its data back from; a test of a read path runs on
/// both (`@Test(arguments: Backend.allCases)`):
/// - `embedded`: one `vdrive serve`, records in SQLite and blocks in its data folder
///   (what `./mount` starts);
/// - `scaled`: records in PostgreSQL and blocks in a real SeaweedFS, shared by two
///   stateless `vdrive serve` processes (blocks are read through the store: a 307 from
///   the server, then a presigned GET).
public enum Backend: String, CaseIterable, Sendable, CustomStringConvertible {
    case embedded, scaled

    public var description: String { rawValue }
}
