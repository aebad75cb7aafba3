import Testing

/// Swift Testing traits shared by the test targets: the tier of every suite, and the
/// conditions that skip a suite, with its reason, on a machine that lacks what it needs.
/// A target of its own, apart from TestSupport: `vdrive-bench` links TestSupport and
/// must not link the test library.
///
/// Every suite carries exactly one tier tag; `Tests/tier NAME` turns a tier into the
/// `swift test --filter` that runs it alone (README.md, "Tests").
extension Tag {
    /// In the test process only: no FUSE mount, no child process serving (`vdrive serve`,
    /// PostgreSQL, SeaweedFS), no root. An in-process server on a loopback port counts.
    @Tag public static var logic: Self
    /// A real FUSE mount of the built `vdrive`, no server process.
    @Tag public static var mount: Self
    /// Real processes end to end: `vdrive serve`, PostgreSQL, SeaweedFS, an external
    /// client, with or without a mount.
    @Tag public static var endToEnd: Self
}
