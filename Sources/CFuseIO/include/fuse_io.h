#ifndef VDRIVE_FUSE_IO_H
#define VDRIVE_FUSE_IO_H

struct fuse_session;

/* Negotiates FUSE_HANDLE_KILLPRIV_V2 on a mounted session, which libfuse 3.14 cannot
   do itself (see fuse_io.c). Call after fuse_session_mount, before the session loop.
   Returns 0, or a negative errno when the session's descriptor cannot be wrapped. */
int vd_fuse_handle_killpriv(struct fuse_session *se);

#endif
