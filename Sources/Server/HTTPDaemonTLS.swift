import CMicroHTTPD

extension HTTPDaemon {
    /// Starts libmicrohttpd with the daemon's options, plain or (with `tls`) HTTPS. The
    /// PEM texts need only live through the call: libmicrohttpd hands them to GnuTLS,
    /// which parses them into its own credentials while the daemon starts.
    static func start(_ tls: TLSConfiguration?, _ flags: UInt32, _ fd: Int32,
                      _ handler: MHD_AccessHandlerCallback, _ handlerCls: UnsafeMutableRawPointer,
                      _ completed: MHD_RequestCompletedCallback, _ completedCls: UnsafeMutableRawPointer,
                      _ notify: MHD_NotifyConnectionCallback, _ notifyCls: UnsafeMutableRawPointer,
                      _ memory: ConnectionMemory, _ connectionLimit: UInt32, _ perAddress: UInt32, _ threads: UInt32,
                      _ idleTimeout: UInt32) -> OpaquePointer? {
        // The PEM texts as C strings for the length of the call (nil: plain HTTP).
        let certificate = tls.map { Array($0.certificatePEM) + [0] }
        let key = tls.map { Array($0.keyPEM) + [0] }
        return withOptionalCString(certificate) { certificatePEM in
            withOptionalCString(key) { keyPEM in
                vd_mhd_start(flags, fd, handler, handlerCls, completed, completedCls, notify, notifyCls, memory.pool, memory.increment, connectionLimit,
                             perAddress, threads, idleTimeout, certificatePEM, keyPEM)
            }
        }
    }
}

/// `bytes` (NUL-terminated) as a C string for `body`, or NULL.
private func withOptionalCString<T>(_ bytes: [UInt8]?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
    guard let bytes else { return body(nil) }
    return bytes.withUnsafeBufferPointer { buffer in
        buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { body($0) }
    }
}
