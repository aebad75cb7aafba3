/* The FUSE device's reads and writes, through libfuse's custom I/O hooks. Two things
   differ from libfuse's own: a WRITE's bytes are read into a page-aligned buffer
   (below, at read_request), and two flags are added to the INIT reply, each only when
   the kernel's INIT request offered it. libfuse 3.14 knows neither flag.

   FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33): the kernel marks the mount SB_NOSEC. It then
   asks for `security.capability` once per inode instead of before every write(2), and
   no longer refreshes a file's attributes before every chown(2): for `tar x`, two of
   the fourteen requests each small file costs. In exchange the file system clears
   setuid, setgid and file capabilities itself on write, truncate and chown (the drive
   does: Sources/Drive/Privileges.swift).

   FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): a file opened with direct_io
   can still be mapped shared (mmap goes through the page cache, reads and writes do
   not). The drive opens content it does not hold with direct_io only when the kernel
   took this flag, so that an image viewer's mmap keeps working
   (vd_fuse_direct_io_allows_mmap).

   The INIT request is the first a session reads and its reply the first it writes,
   before any other request is read, so one state per descriptor is enough. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "fuse_io.h"
#include "shim.h"   /* vd_read_buffer */

#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif

#define VD_FDS 4096
/* Per descriptor: where the INIT exchange is, and which flags were offered, then taken. */
enum { VD_NONE = 0, VD_AWAITED, VD_INIT_READ, VD_DONE };
enum { VD_KILLPRIV = 1, VD_DIO_MMAP = 2 };
static unsigned char init_state[VD_FDS];
static unsigned char offered[VD_FDS];
static unsigned char taken[VD_FDS];

static unsigned char load(int fd) {
    return (fd >= 0 && fd < VD_FDS) ? __atomic_load_n(&init_state[fd], __ATOMIC_ACQUIRE) : VD_NONE;
}

static void store(int fd, unsigned char state) {
    __atomic_store_n(&init_state[fd], state, __ATOMIC_RELEASE);
}

/* Write payloads, page-aligned. A request is read with readv: its first 80 bytes (the
   header and, for a WRITE, fuse_write_in) into libfuse's buffer, the rest into this
   thread's page-aligned buffer (shim.h's vd_read_buffer; this file's copy of it is
   its own, apart from the read replies'). A WRITE's bytes stay there, where the write
   handler finds them (vd_fuse_write_payload) and can hand them to O_DIRECT; any other
   request's rest is copied back behind its first 80 bytes, where libfuse expects it
   (requests other than WRITE are small). libfuse's workers read and handle a request
   on one thread. */
#define VD_WRITE_HEAD (sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in))
/* Where libfuse will look for this thread's WRITE bytes, and where they are. */
static __thread const char *payload_param;
static __thread const void *payload;

/* libfuse's workers take the name of the thread that started its loop (the process's
   own, which `ps` and `pgrep` show): each names itself on its first request instead. */
static __thread int named;

static ssize_t read_request(int fd, char *buf, size_t len) {
    if (!named) {
        named = 1;
        pthread_setname_np(pthread_self(), "vd-fuse");
    }
    payload_param = NULL;
    char *tail = len > VD_WRITE_HEAD ? vd_read_buffer(len - VD_WRITE_HEAD) : NULL;
    if (tail == NULL) return read(fd, buf, len);
    struct iovec iov[2] = { { buf, VD_WRITE_HEAD }, { tail, len - VD_WRITE_HEAD } };
    ssize_t n = readv(fd, iov, 2);
    if (n <= (ssize_t)VD_WRITE_HEAD) return n;
    const struct fuse_in_header *h = (const void *)buf;
    const struct fuse_write_in *w = (const void *)(h + 1);
    if (h->opcode == FUSE_WRITE && w->size == (uint32_t)(n - VD_WRITE_HEAD)) {
        payload_param = buf + VD_WRITE_HEAD;
        payload = tail;
    } else {
        memcpy(buf + VD_WRITE_HEAD, tail, (size_t)n - VD_WRITE_HEAD);
    }
    return n;
}

const void *vd_fuse_write_payload(const void *param) {
    return (payload_param != NULL && payload_param == param) ? payload : param;
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = read_request(fd, buf, len);
    if (load(fd) == VD_AWAITED && n >= (ssize_t)sizeof(struct fuse_in_header)) {
        const struct fuse_in_header *h = buf;
        if (h->opcode == FUSE_INIT && n >= (ssize_t)(sizeof *h + offsetof(struct fuse_init_in, flags) + sizeof(uint32_t))) {
            const struct fuse_init_in *in = (const void *)(h + 1);
            uint64_t flags = in->flags;
            if ((flags & FUSE_INIT_EXT) && n >= (ssize_t)(sizeof *h + offsetof(struct fuse_init_in, flags2) + sizeof(uint32_t)))
                flags |= (uint64_t)in->flags2 << 32;
            unsigned char o = 0;
            if (in->major == 7 && in->minor >= 33 && (flags & FUSE_HANDLE_KILLPRIV_V2)) o |= VD_KILLPRIV;
            if (in->major == 7 && in->minor >= 39 && (flags & FUSE_DIRECT_IO_ALLOW_MMAP)) o |= VD_DIO_MMAP;
            offered[fd] = o;
            store(fd, VD_INIT_READ);
        }
    }
    return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    if (load(fd) == VD_INIT_READ) {
        unsigned char t = 0;
        int ok = count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header)
            && iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)
            && ((const struct fuse_out_header *)iov[0].iov_base)->error == 0;
        if (ok) {
            struct fuse_init_out *out = iov[1].iov_base;
            if (offered[fd] & VD_KILLPRIV) {
                out->flags |= FUSE_HANDLE_KILLPRIV_V2;
                t |= VD_KILLPRIV;
            }
            /* flags2 counts only when the reply says FUSE_INIT_EXT (libfuse sets it
               whenever the request did). */
            if ((offered[fd] & VD_DIO_MMAP) && (out->flags & FUSE_INIT_EXT)
                && iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t)) {
                out->flags2 |= (uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
                t |= VD_DIO_MMAP;
            }
        }
        __atomic_store_n(&taken[fd], t, __ATOMIC_RELEASE);
        store(fd, VD_DONE);
    }
    return writev(fd, iov, count);
}

/* Without it libfuse would stop splicing read replies from the block files. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout,
                              size_t len, unsigned int flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int vd_fuse_negotiate(struct fuse_session *se) {
    int fd = fuse_session_fd(se);
    if (fd < 0 || fd >= VD_FDS) return -EBADF;
    struct fuse_custom_io io;
    memset(&io, 0, sizeof io);
    io.read = io_read;
    io.writev = io_writev;
    io.splice_send = io_splice_send;
    offered[fd] = 0;
    taken[fd] = 0;
    store(fd, VD_AWAITED);
    int rc = fuse_session_custom_io(se, &io, fd);
    if (rc != 0) store(fd, VD_NONE);
    return rc;
}

int vd_fuse_direct_io_allows_mmap(struct fuse_session *se) {
    int fd = se ? fuse_session_fd(se) : -1;
    if (load(fd) != VD_DONE) return 0;
    return (__atomic_load_n(&taken[fd], __ATOMIC_ACQUIRE) & VD_DIO_MMAP) != 0;
}
