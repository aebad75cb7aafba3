/// The size of each connection's memory pool in libmicrohttpd, and how its read buffer grows.
///
/// The pool holds a request's head (its lines and their parsed fields), the buffer a body
/// is received into, and the reply's head. libmicrohttpd 0.9.75 zeroes the whole pool
/// (`memset` in `MHD_pool_reset`) each time it readies a kept-alive connection for its
/// next request, so from the first answer on every page of the pool stays resident for
/// as long as the connection lives: the pool's size is what an idle or held kept-alive
/// connection costs. 5,000 devices following the change feed on their connections cost
/// 1.3 GiB with 256 KiB pools, 200 MiB with 32 KiB ones (Docs/benchmarks.md, "Long poll").
///
/// 32 KiB is also libmicrohttpd's own default. It still holds the longest head a device
/// sends (a 4096-byte path, every byte percent-encoded: 12 KiB of URL); a larger head is
/// answered 414 or 431. The price is smaller reads of an upload's body: libmicrohttpd
/// reads into half the pool, then grows the buffer by an eighth of what is free whenever
/// less than `increment` of it is free. An increment of the whole pool makes it grow
/// after every read until the pool is nearly used: reads of about 23 KiB instead of 16
/// (128 KiB with the old pools), a fifth more server CPU per uploaded byte on loopback.
struct ConnectionMemory: Sendable {
    /// Bytes of each connection's pool (`MHD_OPTION_CONNECTION_MEMORY_LIMIT`).
    var pool: Int
    /// Free bytes in the read buffer below which it grows (`MHD_OPTION_CONNECTION_MEMORY_INCREMENT`).
    var increment: Int

    init(pool: Int = 32 << 10, increment: Int? = nil) {
        self.pool = pool
        self.increment = increment ?? pool
    }
}
