import CMicroHTTPD

extension HTTPDaemon {
    /// Starts libmicrohttpd with the daemon's options, plain or (with `tls`) HTTPS. The
    /// PEM texts need only live through the call: libmicrohttpd hands them to GnuTLS,
    /// which parses them into its own credentials while the daemon starts.
    static func start(_ tls: TLSConfiguration?, _ flags: UInt32, _ fd: Int32,
                      _ handler: MHD_AccessHandlerCallback, _ handlerCls: UnsafeMutableRawPointer,
                      _ completed: MHD_RequestCompletedCallback, _ completedCls: UnsafeMutableRawPointer,
                      _ notify: MHD_NotifyConnectionCallback, _ notifyCls: UnsafeMutableRawPointer,
                      _ memoryLimit: Int, _ connectionLimit: UInt32, _ perAddress: UInt32, _ threads: UInt32,
                      _ idleTimeout: UInt32) -> OpaquePointer? {
        guard let tls else {
            return vd_mhd_start(flags, fd, handler, handlerCls, completed, completedCls, notify, notifyCls, memoryLimit, connectionLimit,
                                perAddress, threads, idleTimeout)
        }
        let certificate = String(decoding: tls.certificatePEM, as: UTF8.self)
        let key = String(decoding: tls.keyPEM, as: UTF8.self)
        return vd_mhd_start_tls(flags, fd, handler, handlerCls, completed, completedCls, notify, notifyCls, memoryLimit, connectionLimit,
                                perAddress, threads, idleTimeout, certificate, key)
    }
}
