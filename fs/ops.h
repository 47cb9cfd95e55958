/* ops.h - what the FUSE operation files (ops.c: lookups, reads, the
 * operation table; ops_write.c: every change) share.  Internal to fs/. */
#ifndef MFS_FS_OPS_H
#define MFS_FS_OPS_H

#include <sys/stat.h>
#include <time.h>

#include "cache.h"
#include "fs.h"
#include "openfile.h"

/* Remote changes are pushed into the kernel by notify.c, and local changes
 * are made by the kernel itself, so it may keep names and attributes for a
 * long time. */
#define FS_TIMEOUT 3600.0

static inline struct fs_store *ops_store(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* A handle's fh.  A reader's is its file's shared ofile.  A writer's (one
 * counted among the file's writers, ofile_writer_open: opened for
 * writing, or truncating, or creating the file, whatever its access mode)
 * is a struct ops_writer, with the low bit set: its file and the edit it
 * belongs to (openfile.h, "Edits").  Its release is then a writer's; a
 * release's flags cannot tell (the kernel clears O_CREAT and O_TRUNC). */
#define OPS_FH_WRITER ((uint64_t)1)

struct ops_writer {
    struct ofile *f;
    unsigned edit;
    struct ops_writer *prev, *next; /* every writer's handle (ops.c), so
                                     * the ones no release ever ends (the
                                     * daemon's exit) stay reachable */
};

static inline struct ops_writer *ops_fh_writer_of(const struct fuse_file_info *fi)
{
    return fi && (fi->fh & OPS_FH_WRITER)
               ? (struct ops_writer *)(uintptr_t)(fi->fh & ~OPS_FH_WRITER)
               : NULL;
}

static inline struct ofile *ops_ofile(const struct fuse_file_info *fi)
{
    struct ops_writer *w = ops_fh_writer_of(fi);
    return w ? w->f : fi ? (struct ofile *)(uintptr_t)fi->fh : NULL;
}

static inline bool ops_fh_writer(const struct fuse_file_info *fi)
{
    return ops_fh_writer_of(fi) != NULL;
}

/* The edit a handle's changes belong to: OFILE_ANY for a reader's. */
static inline unsigned ops_fh_edit(const struct fuse_file_info *fi)
{
    struct ops_writer *w = ops_fh_writer_of(fi);
    return w ? w->edit : OFILE_ANY;
}

/* Tests only (MEMSTOREFS_TEST_PAUSE_OPEN_MS, fs/daemon.c): milliseconds an
 * open's thread waits after its answer, before what follows it, so that
 * the opener's close can run first on another thread.  0: never. */
extern unsigned ops_pause_open_ms;

/* Sets fi's handle for f: a reader's (w NULL), or a writer's, which joins
 * the edit in progress now.  w is malloc'd by the caller before it changes
 * anything, so that nothing can fail after a change (an O_TRUNC open's
 * emptied buffer must not be saved for an open that failed).  ops_fh_free
 * at its release. */
void ops_set_fh(struct fuse_file_info *fi, struct ofile *f, struct ops_writer *w);
void ops_fh_free(struct fuse_file_info *fi);

static inline int64_t ops_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_REALTIME nanoseconds <-> timespec, for times before 1970 and
 * after 2038 alike (a time past what 64-bit nanoseconds hold is clamped). */
struct timespec ops_ns_to_timespec(int64_t ns);
int64_t ops_timespec_to_ns(const struct timespec *ts);

/* Attributes of a node as read (use ops_getnode for an open file's). */
void ops_fill_attr(const struct fs_store *s, const struct cnode *n, struct stat *st);
/* A node by row, with an open buffer's size and mtime (read consistently
 * with flushes); cnode_clear it. */
int ops_getnode(struct fs_store *s, uint64_t row, struct cnode *n);
/* An entry reply for n (attributes and timeouts). */
void ops_fill_entry(const struct fs_store *s, const struct cnode *n, struct fuse_entry_param *e);
/* True for the marker's name at the store root. */
bool ops_is_marker(const struct fs_store *s, uint64_t parent_row, const char *name);
/* ofile_flush, around which a cut edit's save gets the store's version it
 * puts back (downloaded first when the cache lacks it) and the kernel
 * drops the file's pages after it (-EFBIG). */
int ops_save(struct fs_store *s, struct ofile *f, unsigned edit, enum ofile_flush_why why,
             const struct cache_then *then);
/* ofile_take_over, for a writer's open or a truncate by path: a cut edit
 * it gives up gets the store's version it puts back as ops_save's does. */
int ops_take_over(struct fs_store *s, struct ofile *f, bool *dropped);
/* Downloads n's content (n->memory_id at n->sha) into the cache.  0: look
 * again (it may have changed meanwhile); a negative errno otherwise.
 * When the memory changed again since it was listed, waits for the sync
 * to bring the node to it: 10 s at most with wait, a quarter of a second
 * without (a caller holding directory locks the sync may need), never
 * past *deadline_ms.  queue false: no wait for a download slot either
 * (syncer_fetch; a rename).  *deadline_ms is the operation's bound for
 * the download and the wait, one for all its tries: 0 before its first
 * download, which sets it (syncer_fetch_deadline). */
int ops_fetch(struct fs_store *s, const struct cnode *n, bool wait, bool queue,
              int64_t *deadline_ms);
/* Makes f hold the current content of its file (loading it from the
 * cache, or downloading it); a buffer with unflushed changes is kept. */
int ops_load(struct fs_store *s, struct ofile *f);
/* The mode bits a node reports. */
mode_t ops_mode(const struct fs_store *s, bool is_dir);

/* ops_write.c */
void ops_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                 struct fuse_file_info *fi);
void ops_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void ops_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void ops_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void ops_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void ops_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void ops_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                const char *newname, unsigned int flags);
void ops_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void ops_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                struct fuse_file_info *fi);
void ops_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
               struct fuse_file_info *fi);
void ops_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ops_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void ops_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void ops_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                   struct fuse_file_info *fi);

#endif
