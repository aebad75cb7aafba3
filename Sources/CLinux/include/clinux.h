#ifndef VDRIVE_CLINUX_H
#define VDRIVE_CLINUX_H
#include <sys/types.h>
#include <stdint.h>

/* Linux calls that glibc declares only under _GNU_SOURCE, which Swift's Glibc module does not see. */
ssize_t vd_copy_file_range(int fd_in, int64_t *off_in, int fd_out, int64_t *off_out, size_t len);
int vd_clone_file(int dst_fd, int src_fd);
int vd_syncfs(int fd);
/* fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE): frees a range's disk blocks, reads as zeros. */
int vd_punch_hole(int fd, int64_t offset, int64_t length);
/* sync_file_range(SYNC_FILE_RANGE_WRITE): start writing a range back, without waiting. */
int vd_start_writeback(int fd, int64_t offset, int64_t length);
/* open(path, O_WRONLY | O_DIRECT): writes that bypass the page cache (-1 and errno when
   the file system refuses O_DIRECT, e.g. tmpfs). */
int vd_open_direct_for_writing(const char *path);
/* fstatfs(fd).f_type (the file system's magic number), or -1: <sys/vfs.h> is not in Swift's Glibc. */
long vd_file_system_type(int fd);
/* memfd_create(name, MFD_CLOEXEC): a file in memory (<sys/mman.h> declares it only under _GNU_SOURCE). */
int vd_memory_file(const char *name);
/* mallopt(M_MMAP_THRESHOLD) and mallopt(M_ARENA_MAX): <malloc.h> is not in Swift's Glibc. */
void vd_tune_malloc(int mmap_threshold, int max_arenas);
/* malloc_trim(0): gives the heap's free pages back to the system. */
void vd_trim_heap(void);
/* pthread_setname_np(pthread_self(), name), the name cut to the kernel's 15 bytes. */
int vd_name_this_thread(const char *name);
#endif

#ifndef VDRIVE_CLINUX_RENAME
#define VDRIVE_CLINUX_RENAME
int vd_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);
#endif

/* <sys/xattr.h> is not part of Swift's Glibc module. */
int vd_setxattr(const char *path, const char *name, const void *value, size_t size, int flags);
ssize_t vd_getxattr(const char *path, const char *name, void *value, size_t size);
ssize_t vd_listxattr(const char *path, char *list, size_t size);
int vd_removexattr(const char *path, const char *name);
