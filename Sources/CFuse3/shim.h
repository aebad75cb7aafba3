#ifndef VDRIVE_CFUSE3_SHIM_H
#define VDRIVE_CFUSE3_SHIM_H
#define FUSE_USE_VERSION 314
#include <stddef.h>
#include <string.h>
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <pthread.h>
#include <unistd.h>

/* libfuse 3.14 makes fuse_session_loop_mt a macro over a versioned symbol. */
static inline int vd_fuse_session_loop_mt(struct fuse_session *se, unsigned int max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) return -1;
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_max_threads(config, 16);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    int rc = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return rc;
}

/* fuse_file_info packs its flags into bit-fields Swift cannot set. */
static inline void vd_fi_set_direct_io(struct fuse_file_info *fi, int on) { fi->direct_io = on ? 1 : 0; }
static inline void vd_fi_set_keep_cache(struct fuse_file_info *fi, int on) { fi->keep_cache = on ? 1 : 0; }
static inline void vd_fi_set_cache_readdir(struct fuse_file_info *fi, int on) { fi->cache_readdir = on ? 1 : 0; }
static inline void vd_fi_set_noflush(struct fuse_file_info *fi, int on) { fi->noflush = on ? 1 : 0; }
static inline int vd_fi_flags(const struct fuse_file_info *fi) { return fi->flags; }
static inline uint64_t vd_fi_fh(const struct fuse_file_info *fi) { return fi->fh; }
static inline void vd_fi_set_fh(struct fuse_file_info *fi, uint64_t fh) { fi->fh = fh; }

/* The connection's capability words differ across versions; keep the bit names here. */
static inline void vd_conn_configure(struct fuse_conn_info *conn, unsigned max_write) {
    conn->max_write = max_write;
    conn->max_readahead = max_write;
    /* No SPLICE_READ: it pays off only for a write_buf handler that splices the payload
       onward; our write handler needs the bytes in memory to hash them, so libfuse would
       splice each request into a pipe and then copy it out again: two more system calls
       per request, on every request (measured: tar x, Docs/benchmarks.md). */
    conn->want &= ~FUSE_CAP_SPLICE_READ;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
    if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
    /* O_TRUNC arrives with open, so the old content stays until the new one is committed. */
    if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
    /* readdirplus for every listing: ls -l then needs no lookup per entry. */
    conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
    /* Without writeback cache every write reaches us, so hashing sees every byte in order. */
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
    conn->max_background = 64;
    conn->congestion_threshold = 48;
}

/* Each FUSE worker thread's buffer for read replies, kept for the thread's life and
   freed when it ends. */
struct vd_read_buffer { void *mem; size_t cap; };
/* (Statics inside functions: Swift's importer emits a header's functions, not its globals.) */
static inline pthread_key_t *vd_read_buffer_key(void) { static pthread_key_t key; return &key; }
static inline pthread_once_t *vd_read_buffer_once(void) { static pthread_once_t once = PTHREAD_ONCE_INIT; return &once; }
static inline void vd_read_buffer_free(void *p) {
    struct vd_read_buffer *b = (struct vd_read_buffer *)p;
    free(b->mem);
    free(b);
}
static inline void vd_read_buffer_init(void) { pthread_key_create(vd_read_buffer_key(), vd_read_buffer_free); }
static inline void *vd_read_buffer(size_t size) {
    pthread_once(vd_read_buffer_once(), vd_read_buffer_init);
    struct vd_read_buffer *b = (struct vd_read_buffer *)pthread_getspecific(*vd_read_buffer_key());
    if (b == NULL) {
        b = (struct vd_read_buffer *)calloc(1, sizeof(*b));
        if (b == NULL) return NULL;
        if (pthread_setspecific(*vd_read_buffer_key(), b) != 0) { free(b); return NULL; }
    }
    if (b->cap < size) {
        free(b->mem);
        b->mem = NULL;
        b->cap = 0;
        if (posix_memalign(&b->mem, 4096, size) != 0) { b->mem = NULL; return NULL; }
        b->cap = size;
    }
    return b->mem;
}

/* Replies with the pieces gathered in the thread's buffer: one pread per stored piece,
   a copy of each piece in memory, one write to the kernel. For a read larger than
   libfuse's splice pipe holds (64 KiB: its size heuristic counts buffers, not bytes, so
   the pipe never grows for one large piece) libfuse splices what fits and then reads the
   rest into memory it allocates and frees on every request (its pages faulted in on
   every reply, seen in a profile of a cold sequential read). Stops at a short piece (end
   of a file), as libfuse's copy does. */
static inline int vd_fuse_reply_pieces_buffered(fuse_req_t req, int count, const int *fds, const off_t *pos,
                                                const size_t *lens, const void *const *mems) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += lens[i];
    char *out = (char *)vd_read_buffer(total);
    if (out == NULL) return fuse_reply_err(req, ENOMEM);
    size_t filled = 0;
    for (int i = 0; i < count; i++) {
        if (mems[i] != NULL || fds[i] < 0) {
            if (mems[i] != NULL) memcpy(out + filled, mems[i], lens[i]);
            else memset(out + filled, 0, lens[i]);
            filled += lens[i];
            continue;
        }
        size_t done = 0;
        while (done < lens[i]) {
            ssize_t r = pread(fds[i], out + filled + done, lens[i] - done, pos[i] + (off_t)done);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return fuse_reply_err(req, errno);
            if (r == 0) break;
            done += (size_t)r;
        }
        filled += done;
        if (done < lens[i]) break;
    }
    return fuse_reply_buf(req, out, filled);
}

/* Replies up to this size are spliced by libfuse (they fit its pipe). */
#define VD_SPLICE_REPLY_MAX (48 * 1024)

/* Replies to a read with pieces of several files, bytes in memory and zeros (a file
   stored in blocks, holes included), in one reply. Piece i is `lens[i]` bytes: from
   `mems[i]` when it is not NULL (a block just fetched and checked), else of `fds[i]`
   from `pos[i]`, or zeros when `fds[i]` is -1, taken from `zeros` (a read-only region
   of `zeros_len` zero bytes the caller keeps mapped). */
static inline int vd_fuse_reply_pieces(fuse_req_t req, int count, const int *fds, const off_t *pos, const size_t *lens,
                                       const void *const *mems, const void *zeros, size_t zeros_len) {
    int has_fd = 0;
    size_t whole = 0, slots = 0;
    for (int i = 0; i < count; i++) {
        if (mems[i] == NULL && fds[i] >= 0) has_fd = 1;
        whole += lens[i];
        /* A hole longer than the zero region takes several buffers. */
        slots += (mems[i] != NULL || fds[i] >= 0) ? 1 : (lens[i] + zeros_len - 1) / zeros_len;
    }
    if (!has_fd && slots <= 64) {
        /* Memory and holes only: one write of them, no copy here (splicing memory into
           a pipe would copy every byte twice and cost pipe pages). */
        struct iovec iov[64];
        int k = 0;
        for (int i = 0; i < count; i++) {
            if (mems[i] != NULL) {
                iov[k].iov_base = (void *)mems[i];
                iov[k].iov_len = lens[i];
                k++;
                continue;
            }
            size_t left = lens[i];
            while (left > 0) {
                size_t take = left < zeros_len ? left : zeros_len;
                iov[k].iov_base = (void *)zeros;
                iov[k].iov_len = take;
                k++;
                left -= take;
            }
        }
        return fuse_reply_iov(req, iov, k);
    }
    if (whole > VD_SPLICE_REPLY_MAX || !has_fd) return vd_fuse_reply_pieces_buffered(req, count, fds, pos, lens, mems);
    struct fuse_bufvec *vec = (struct fuse_bufvec *)calloc(1, sizeof(struct fuse_bufvec) + slots * sizeof(struct fuse_buf));
    if (vec == NULL) return fuse_reply_err(req, ENOMEM);
    int n = 0;
    for (int i = 0; i < count; i++) {
        if (mems[i] != NULL) {
            vec->buf[n].size = lens[i];
            vec->buf[n].mem = (void *)mems[i];
            n++;
        } else if (fds[i] >= 0) {
            vec->buf[n].size = lens[i];
            vec->buf[n].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
            vec->buf[n].fd = fds[i];
            vec->buf[n].pos = pos[i];
            n++;
        } else {
            size_t left = lens[i];
            while (left > 0) {
                size_t take = left < zeros_len ? left : zeros_len;
                vec->buf[n].size = take;
                vec->buf[n].mem = (void *)zeros;
                n++;
                left -= take;
            }
        }
    }
    vec->count = (size_t)n;
    vec->idx = 0;
    vec->off = 0;
    /* No SPLICE_MOVE: moving would steal the pages from the block file's page cache (and
       charge and uncharge them), slower than the one copy into the request (measured). */
    int rc = fuse_reply_data(req, vec, (enum fuse_buf_copy_flags)0);
    free(vec);
    return rc;
}

static inline int vd_errno(void) { return errno; }
static inline unsigned vd_conn_max_write(const struct fuse_conn_info *conn) { return conn->max_write; }
static inline void vd_set_errno(int e) { errno = e; }

static inline const char *vd_fuse_version(void) { return fuse_pkgversion(); }
#endif
