/* The FUSE device's reads and writes, through libfuse's custom I/O hooks, passed
   through unchanged except for one flag in the INIT reply.

   Why: with FUSE_HANDLE_KILLPRIV_V2 the kernel marks the mount SB_NOSEC. It then asks
   for `security.capability` once per inode instead of before every write(2), and no
   longer refreshes a file's attributes before every chown(2): for `tar x`, two of the
   fourteen requests each small file costs. In exchange the file system clears setuid,
   setgid and file capabilities itself on write, truncate and chown (the drive does:
   Sources/Drive/Privileges.swift). libfuse 3.14 knows neither the flag nor
   FUSE_CAP_HANDLE_KILLPRIV_V2, so it is added here, only when the kernel's INIT
   request offered it (protocol 7.33 and later).

   The INIT request is the first a session reads and its reply the first it writes,
   before any other request is read, so one state per descriptor is enough. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "fuse_io.h"

#define VD_FDS 4096
enum { VD_NONE = 0, VD_AWAITED, VD_OFFERED, VD_TAKEN, VD_REFUSED };
static unsigned char init_state[VD_FDS];

static unsigned char load(int fd) {
    return (fd >= 0 && fd < VD_FDS) ? __atomic_load_n(&init_state[fd], __ATOMIC_ACQUIRE) : VD_NONE;
}

static void store(int fd, unsigned char state) {
    __atomic_store_n(&init_state[fd], state, __ATOMIC_RELEASE);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    ssize_t n = read(fd, buf, len);
    if (load(fd) == VD_AWAITED && n >= (ssize_t)sizeof(struct fuse_in_header)) {
        const struct fuse_in_header *h = buf;
        if (h->opcode == FUSE_INIT && n >= (ssize_t)(sizeof *h + sizeof(struct fuse_init_in))) {
            const struct fuse_init_in *in = (const void *)(h + 1);
            int offered = in->major == 7 && in->minor >= 33 && (in->flags & FUSE_HANDLE_KILLPRIV_V2);
            store(fd, offered ? VD_OFFERED : VD_REFUSED);
        }
    }
    return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    if (load(fd) == VD_OFFERED) {
        int ok = count >= 2 && iov[0].iov_len == sizeof(struct fuse_out_header)
            && iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t)
            && ((const struct fuse_out_header *)iov[0].iov_base)->error == 0;
        if (ok) ((struct fuse_init_out *)iov[1].iov_base)->flags |= FUSE_HANDLE_KILLPRIV_V2;
        store(fd, ok ? VD_TAKEN : VD_REFUSED);
    }
    return writev(fd, iov, count);
}

/* Without it libfuse would stop splicing read replies from the block files. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout,
                              size_t len, unsigned int flags, void *userdata) {
    (void)userdata;
    return splice(fdin, offin, fdout, offout, len, flags);
}

int vd_fuse_handle_killpriv(struct fuse_session *se) {
    int fd = fuse_session_fd(se);
    if (fd < 0 || fd >= VD_FDS) return -EBADF;
    struct fuse_custom_io io;
    memset(&io, 0, sizeof io);
    io.read = io_read;
    io.writev = io_writev;
    io.splice_send = io_splice_send;
    store(fd, VD_AWAITED);
    int rc = fuse_session_custom_io(se, &io, fd);
    if (rc != 0) store(fd, VD_NONE);
    return rc;
}
