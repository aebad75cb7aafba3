#ifndef VDRIVE_CMICROHTTPD_SHIM_H
#define VDRIVE_CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/* MHD_start_daemon is variadic; this wrapper fixes the options the server uses.
   The listening socket is made by the caller (so it can report EADDRINUSE itself).
   `flags` should include MHD_USE_EPOLL_INTERNAL_THREAD and MHD_ALLOW_SUSPEND_RESUME.
   With a certificate (NULL: plain HTTP) the daemon speaks HTTPS through libmicrohttpd's
   TLS (GnuTLS): a PEM certificate (its chain may follow) and an unencrypted PEM key,
   both NUL-terminated; they are added as an option array, so one list of options
   serves both. */
static inline struct MHD_Daemon *vd_mhd_start(unsigned int flags, int listen_fd,
                                              MHD_AccessHandlerCallback handler, void *handler_cls,
                                              MHD_RequestCompletedCallback completed, void *completed_cls,
                                              MHD_NotifyConnectionCallback notify, void *notify_cls,
                                              size_t memory_limit, size_t memory_increment, unsigned int connection_limit,
                                              unsigned int per_address_limit, unsigned int thread_pool_size,
                                              unsigned int timeout_seconds,
                                              const char *certificate_pem, const char *key_pem) {
    struct MHD_OptionItem tls[] = {
        { MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)certificate_pem },
        { MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key_pem },
        { MHD_OPTION_END, 0, NULL },
    };
    struct MHD_OptionItem none[] = { { MHD_OPTION_END, 0, NULL } };
    int secure = certificate_pem != NULL && key_pem != NULL;
    return MHD_start_daemon(flags | (secure ? MHD_USE_TLS : 0), 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                            MHD_OPTION_CONNECTION_MEMORY_INCREMENT, memory_increment,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address_limit,
                            MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
                            MHD_OPTION_ARRAY, secure ? tls : none,
                            MHD_OPTION_END);
}

/* MHD_get_connection_info is variadic: the two fields the connection guard reads. */
static inline int vd_mhd_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}
static inline void *vd_mhd_socket_context(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}
/* The client's address as text into `out` (NUL-terminated); returns 1 when it is a
   loopback address (127.0.0.0/8, ::1, ::ffff:127.x), 0 when not, -1 when unknown. */
static inline int vd_mhd_client_address(struct MHD_Connection *c, char *out, socklen_t size) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr || size == 0) return -1;
    const struct sockaddr *sa = info->client_addr;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        if (!inet_ntop(AF_INET, &in->sin_addr, out, size)) return -1;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (!inet_ntop(AF_INET6, &in6->sin6_addr, out, size)) return -1;
        if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return 1;
        return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
    }
    return -1;
}
/* How a request ended: 0 its reply sent, 1 the idle timeout, 2 the daemon stopping,
   3 anything else (a read or write failed, the client left). */
static inline int vd_mhd_termination_kind(enum MHD_RequestTerminationCode code) {
    switch (code) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return 0;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return 1;
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return 2;
    default: return 3;
    }
}
static inline unsigned int vd_mhd_flag_epoll(void) { return MHD_USE_EPOLL_INTERNAL_THREAD; }
static inline unsigned int vd_mhd_flag_suspend(void) { return MHD_ALLOW_SUSPEND_RESUME; }
static inline unsigned int vd_mhd_notify_started(void) { return MHD_CONNECTION_NOTIFY_STARTED; }

/* Enum constants Swift imports awkwardly, wrapped as plain calls. */
static inline struct MHD_Response *vd_mhd_response_copy(size_t size, const void *data) {
    return MHD_create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
}
/* The _n variants pass each value's length: a value with a NUL byte (a query argument's
   %00) is seen whole, so it can be refused, not silently cut at the NUL. */
static inline int vd_mhd_headers(struct MHD_Connection *c, MHD_KeyValueIteratorN it, void *cls) {
    return MHD_get_connection_values_n(c, MHD_HEADER_KIND, it, cls);
}
static inline int vd_mhd_query(struct MHD_Connection *c, MHD_KeyValueIteratorN it, void *cls) {
    return MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, it, cls);
}

/* A stream body's read failed: libmicrohttpd closes the connection (a cast macro). */
static inline ssize_t vd_mhd_reader_error(void) { return MHD_CONTENT_READER_END_WITH_ERROR; }

/* MHD_YES / MHD_NO as plain ints for Swift. */
static inline enum MHD_Result vd_mhd_yes(void) { return MHD_YES; }
static inline enum MHD_Result vd_mhd_no(void) { return MHD_NO; }
#endif
