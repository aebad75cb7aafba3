#ifndef VDRIVE_CLINUX_H
#define VDRIVE_CLINUX_H
#include <sys/types.h>
#include <stdint.h>

/* Linux calls that glibc declares only under _GNU_SOURCE, which Swift's Glibc module does not see. */
ssize_t vd_copy_file_range(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len);
int vd_clone_file(int dst_fd, int src_fd);
#endif
