/* runtime.h - the per-host state of running memstorefs daemons: the
 * runtime directory, one lock file per mounted store (so a store is
 * mounted at most once on a host) and each daemon's control socket. */
#ifndef MFS_RUNTIME_H
#define MFS_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* MEMSTOREFS_RUNTIME_DIR, else /run/memstorefs for root, else
 * $XDG_RUNTIME_DIR/memstorefs, else /tmp/memstorefs-UID.  Created 0700;
 * an existing one is used only when it is ours with mode 0700 (else
 * -EPERM, -ELOOP or -ENOTDIR, the reason in rt_error()). */
int rt_dir(char *buf, size_t len);
/* Its path only: nothing is created or checked. */
int rt_dir_name(char *buf, size_t len);
/* The reason of the last refusal of the runtime directory or of a lock
 * file ("" when none). */
const char *rt_error(void);

/* What a store's lock file says. */
struct rt_lockinfo {
    pid_t pid;
    char store_id[128];
    char mount_path[4096];
    char cache_dir[4096];  /* the daemon's --cache-dir ("" from an older one) */
    char mounted_at[4096]; /* the mount point as the mount table names it (its
                            * symbolic links resolved when it was made); ""
                            * from an older daemon: mount_path then */
    uint64_t mount_id;     /* the mount's unique id (statx STATX_MNT_ID_UNIQUE,
                            * never reused while the system runs), once
                            * mounted; 0: not known (an older daemon's record,
                            * or a kernel before 6.8) */
    char boot_id[40];      /* the kernel's boot id when the record was made
                            * (mount ids start again at each boot); "" from
                            * an older daemon */
    char created[8][4096]; /* directories the mount created, parents first */
    int n_created;
};

/* Where info's mount is in the mount table: mounted_at, else mount_path. */
const char *rt_mount_point(const struct rt_lockinfo *info);

/* Whether the record a lock file holds (a daemon that died holding it
 * left it; all zero for a new file) must stay: rt_lock_store then takes
 * nothing over. */
typedef bool (*rt_keep_fn)(const struct rt_lockinfo *prev, void *arg);

/* Takes the store's lock (flock, held as long as *fd is open) and writes
 * info into it.  -EBUSY when another live daemon holds it; *other is then
 * filled from its file.  With keep, the record found under the lock is
 * given to it first: when it says keep, the file is left as it is, the
 * lock let go, *other filled from it, and -ENOTCONN returned (a dead
 * mount's record, which status and unmount need).  A lock file that is a
 * symbolic link, not a regular file, or not ours is refused (-EPERM,
 * reason in rt_error()). */
int rt_lock_store(const struct rt_lockinfo *info, int *fd, char **file,
                  struct rt_lockinfo *other, rt_keep_fn keep, void *arg);
/* Rewrites the lock file (after the directories were created). */
int rt_lock_update(int fd, const struct rt_lockinfo *info);
/* This boot's id (/proc/sys/kernel/random/boot_id), or "" when it cannot
 * be read. */
void rt_boot_id(char out[40]);
/* Reads the record of the lock file open as fd. */
int rt_lock_read(int fd, struct rt_lockinfo *info);
/* Removes the file (only when it is still the one fd holds, and ours) and
 * closes fd; accepts fd < 0. */
void rt_unlock_store(int fd, const char *file);

/* Calls fn for each lock file (regular files of ours only); alive says
 * whether a daemon holds it. */
typedef int (*rt_lock_fn)(void *arg, const char *file, const struct rt_lockinfo *info,
                          bool alive);
int rt_each_lock(rt_lock_fn fn, void *arg);

/* When abs (absolute, no "." or ".." segment) is info's mount point or a
 * path under it: the length of abs's part that names the mount point; 0
 * when it is not.  The mount path matches as the session gave it and as
 * the kernel mounted it, the symbolic links of its parent directories
 * resolved (realpath and getcwd give that form): mounted_at, recorded
 * then, so that nothing is looked up (an older daemon's record: its
 * parent resolved now). */
size_t rt_mount_prefix(const struct rt_lockinfo *info, const char *abs);

/* True when a lock file names mount_path and its daemon is gone. */
bool rt_is_dead_mount(const char *mount_path);

/* A daemon marks itself as setting up its mount until its control socket
 * is open, so that commands wait for that socket only then (a daemon that
 * could not open it is not waited for).  on: made; off: removed. */
int rt_mounting(bool on);
/* Whether daemon pid has that mark. */
bool rt_is_mounting(pid_t pid);

/* The control socket path of daemon pid. */
int rt_sock_path(pid_t pid, char *buf, size_t len);

#endif
