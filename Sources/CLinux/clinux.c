#define _GNU_SOURCE
#include "clinux.h"
#include <unistd.h>
#include <sys/ioctl.h>
#include <linux/fs.h>

ssize_t vd_copy_file_range(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len) {
    loff_t in = *off_in, out = *off_out;
    ssize_t n = copy_file_range(fd_in, &in, fd_out, &out, len, 0);
    *off_in = in;
    *off_out = out;
    return n;
}

int vd_clone_file(int dst_fd, int src_fd) {
    return ioctl(dst_fd, FICLONE, src_fd);
}
