#ifndef VDRIVE_FUSE_IO_H
#define VDRIVE_FUSE_IO_H

struct fuse_session;

/* Negotiates FUSE_HANDLE_KILLPRIV_V2 and FUSE_DIRECT_IO_ALLOW_MMAP on a mounted
   session, which libfuse 3.14 cannot do itself (see fuse_io.c). Call after
   fuse_session_mount, before the session loop. Returns 0, or a negative errno when the
   session's descriptor cannot be wrapped. */
int vd_fuse_negotiate(struct fuse_session *se);

/* 1 once the kernel took FUSE_DIRECT_IO_ALLOW_MMAP in this session's INIT exchange:
   files opened with direct_io can then still be mapped shared. Else 0. */
int vd_fuse_direct_io_allows_mmap(struct fuse_session *se);

/* The bytes of the WRITE request this thread is handling: libfuse hands the write
   handler `param`, a pointer into its own buffer; the bytes are in a page-aligned
   buffer of this thread instead (see fuse_io.c), which this returns. Any other
   pointer comes back unchanged. */
const void *vd_fuse_write_payload(const void *param);

#endif
