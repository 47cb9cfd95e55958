/* fs.h - what the files of fs/ share: one mounted store and the daemon. */
#ifndef MFS_FS_H
#define MFS_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "fuseio.h"

struct cache;
struct syncer;

/* One store, mounted at mount_path by its own FUSE session. */
struct fs_store {
    /* Set before the session starts, then read-only: */
    char *id;
    char *name;
    char *mount_path;
    bool read_only;
    uint64_t root;          /* cache row of the root directory */
    char *marker;           /* marker file bytes */
    struct timespec mounted_at; /* the marker's times */
    size_t marker_len;
    uid_t uid;
    gid_t gid;
    mode_t umask;           /* --umask: taken from every mode */
    bool no_xattrs;         /* --no-xattrs: the kernel stops asking (ENOSYS) */
    char *own_name;         /* the name from the API when none was given (malloc'd) */
    struct cache *cache;
    struct syncer *sync;
    int sync_idx;           /* this store's index in the syncer */
    char **created_dirs;    /* directories mount created, deepest last */
    size_t n_created;
    int dir_fd;             /* the mount directory, O_PATH (mountdir.c), -1 if none */
    int parent_fd;          /* its parent directory, O_PATH, -1 if none */
    char dir_ref[32];       /* "/proc/self/fd/N" of dir_fd: what a root daemon mounts on */
    int lock_fd;            /* flock'd store lock, -1 if none */
    char *lock_file;

    /* Session state, owned by the daemon's main thread; `mounted` is also
     * read by notify.c under se_lock, so se is never used after teardown. */
    pthread_mutex_t se_lock;
    struct fuse_session *se;
    pthread_t loop;
    bool loop_running;
    bool loop_left;         /* torn down with its loop thread still serving
                             * files held open (daemon_reap_loops joins it
                             * once it ends; se is kept until then) */
    volatile int loop_done; /* set by the loop thread when it returns */
    int wake_fd;            /* the daemon's eventfd, written as the loop thread ends */
    bool mounted;
    bool gone;              /* torn down */
    size_t edits_lost;      /* files open at its final sync whose unsaved
                             * edits could not be kept (daemon_final_sync) */
    int edits_lost_err;     /* the first one's negative errno */
    char *final_report;     /* what its unmount reported left unpushed
                             * (malloc'd, "" for nothing), for a second
                             * unmount that asked meanwhile */
    bool final_left;        /* that report names something left */
    bool no_opendir;        /* set at FUSE init: the kernel may skip OPENDIR */
    struct fuseio fio;      /* the session's device I/O (fuseio.c) */
};

/* ops.c */
extern const struct fuse_lowlevel_ops fs_ops;

/* notify.c: the only caller of fuse_lowlevel_notify_*. */
struct sync_notify;
void fs_notify_init(struct fs_store *s, struct sync_notify *n);
/* The kernel drops row's cached pages and attributes: its content went
 * back to what the cache holds under a FLUSH or FSYNC (openfile.c). */
void fs_notify_reverted(struct fs_store *s, uint64_t row);
/* Has the kernel write the pages it holds dirty of every file of s open
 * for writing (a shared writable mapping's, which no request brought
 * yet) into the open files: at the session's end, before their unsaved
 * edits are counted and kept (finalsync.c), where the connection's end
 * would otherwise throw them away.  From the thread of the final sync,
 * only while s's request loop runs (it serves those WRITEs). */
void fs_notify_settle_open(struct fs_store *s);
/* The cache's replay hook (cache_on_replay; arg: the struct daemon):
 * the kernel drops what it holds of each row and of its name. */
void fs_notify_replayed(void *arg, const uint64_t *rows, size_t n);

/* Kernel inode <-> cache row. */
static inline uint64_t fs_to_row(const struct fs_store *s, fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID ? s->root : (uint64_t)ino;
}
static inline fuse_ino_t fs_to_kernel(const struct fs_store *s, uint64_t row)
{
    return row == s->root ? FUSE_ROOT_ID : (fuse_ino_t)row;
}

#endif
