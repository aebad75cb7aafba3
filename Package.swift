// swift-tools-version:6.0
import PackageDescription

// Every target declares each module it imports, none reached through another target.
// Each Debian C library's system-library target is imported by one Swift target only;
// CLinux (Linux calls Glibc hides) by Storage, Drive and DriveTests (Docs/architecture.md).
let package = Package(
    name: "VirtualDrive",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "vdrive", targets: ["vdrive"]),
        .executable(name: "vdrive-bench", targets: ["vdrive-bench"]),
    ],
    targets: [
        // C libraries from Debian, wrapped by system-library targets.
        .systemLibrary(name: "CFuse3", pkgConfig: "fuse3", providers: [.apt(["libfuse3-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),

        .target(name: "CLinux"),
        // shim.h (CFuse3) for its per-thread buffer.
        .target(name: "CFuseIO", dependencies: ["CFuse3"], cSettings: [.headerSearchPath("../CFuse3")]),

        .target(name: "Crypto", dependencies: ["CCrypto"]),
        .target(name: "Storage", dependencies: ["CSQLite", "Crypto", "CLinux"]),
        .target(name: "Drive", dependencies: ["CFuse3", "CFuseIO", "CLinux", "Crypto", "Storage"]),
        .target(name: "Protocol", dependencies: ["Crypto"]),
        .target(name: "HTTPClient", dependencies: ["CCurl", "Crypto"]),
        .target(name: "Client", dependencies: ["HTTPClient", "Protocol", "Crypto"]),
        .target(name: "ObjectStore", dependencies: ["HTTPClient", "Crypto"]),
        .target(name: "Postgres", dependencies: ["CPostgres"]),
        .target(name: "Server", dependencies: ["CMicroHTTPD", "Storage", "Postgres", "Protocol", "Crypto", "ObjectStore"]),
        .target(name: "Backup", dependencies: ["Storage", "Crypto"]),
        .target(name: "WorkspaceMirror", dependencies: ["Drive", "Storage", "Crypto", "Backup"]),
        // The pieces that join the drive, the backup, the mirror and the client on one device.
        .target(name: "DeviceWiring", dependencies: ["Drive", "Storage", "Backup", "WorkspaceMirror", "Client", "HTTPClient", "Protocol", "Crypto"]),
        // The command line over DeviceWiring (and `vdrive serve` over Server).
        .executableTarget(name: "vdrive", dependencies: ["DeviceWiring", "Drive", "Storage", "Server", "Backup", "WorkspaceMirror", "Client", "HTTPClient", "Protocol", "Crypto", "CLinux"]),
        .executableTarget(name: "vdrive-bench", dependencies: ["Server", "Client", "Protocol", "Crypto", "Storage", "Drive", "TestSupport", "ObjectStore"]),

        .target(name: "TestSupport", dependencies: ["Crypto"], path: "Tests/TestSupport"),
        .target(name: "TestTraits", path: "Tests/TestTraits"),
        .testTarget(name: "StorageTests", dependencies: ["Storage", "Crypto", "TestSupport", "TestTraits"]),
        .testTarget(name: "ObjectStoreTests", dependencies: ["ObjectStore", "HTTPClient", "Crypto", "TestSupport", "TestTraits"]),
        .testTarget(name: "DriveTests", dependencies: ["Drive", "Storage", "Crypto", "CLinux", "Backup", "DeviceWiring", "TestSupport", "TestTraits"], exclude: ["Fixtures"]),
        .testTarget(name: "ServerTests", dependencies: ["Server", "Client", "HTTPClient", "Protocol", "Crypto", "Storage", "TestSupport", "TestTraits", "ObjectStore"]),
        .testTarget(name: "BackupTests", dependencies: ["Backup", "Storage", "Crypto", "TestSupport", "TestTraits"], exclude: ["Fixtures"]),
        .testTarget(name: "MirrorTests", dependencies: ["WorkspaceMirror", "Drive", "Storage", "Crypto", "TestSupport", "TestTraits"]),
        .testTarget(name: "WiringTests", dependencies: ["DeviceWiring", "Drive", "Storage", "Backup", "Crypto", "TestSupport", "TestTraits"]),
    ]
)
