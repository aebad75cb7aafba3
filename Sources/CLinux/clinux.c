#define _GNU_SOURCE
#include "clinux.h"
#include <unistd.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <malloc.h>
#include <fcntl.h>
#include <sys/vfs.h>
#include <sys/mman.h>

ssize_t vd_copy_file_range(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len) {
    loff_t in = *off_in, out = *off_out;
    ssize_t n = copy_file_range(fd_in, &in, fd_out, &out, len, 0);
    *off_in = in;
    *off_out = out;
    return n;
}

int vd_memory_file(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}

int vd_clone_file(int dst_fd, int src_fd) {
    return ioctl(dst_fd, FICLONE, src_fd);
}

int vd_punch_hole(int fd, int64_t offset, int64_t length) {
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
}

int vd_syncfs(int fd) {
    return syncfs(fd);
}

int vd_start_writeback(int fd, int64_t offset, int64_t length) {
    return sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE);
}

long vd_file_system_type(int fd) {
    struct statfs fs;
    return fstatfs(fd, &fs) == 0 ? (long)fs.f_type : -1;
}

int vd_open_direct_for_writing(const char *path) {
    return open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

void vd_tune_malloc(int mmap_threshold, int max_arenas) {
    mallopt(M_MMAP_THRESHOLD, mmap_threshold);
    mallopt(M_ARENA_MAX, max_arenas);
}

void vd_trim_heap(void) {
    malloc_trim(0);
}

#include <pthread.h>
#include <string.h>
int vd_name_this_thread(const char *name) {
    char cut[16];
    strncpy(cut, name, sizeof cut - 1);
    cut[sizeof cut - 1] = 0;
    return pthread_setname_np(pthread_self(), cut);
}

#include <stdio.h>
#include <fcntl.h>
int vd_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
    return renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}

#include <sys/xattr.h>
int vd_setxattr(const char *path, const char *name, const void *value, size_t size, int flags) { return setxattr(path, name, value, size, flags); }
ssize_t vd_getxattr(const char *path, const char *name, void *value, size_t size) { return getxattr(path, name, value, size); }
ssize_t vd_listxattr(const char *path, char *list, size_t size) { return listxattr(path, list, size); }
int vd_removexattr(const char *path, const char *name) { return removexattr(path, name); }
