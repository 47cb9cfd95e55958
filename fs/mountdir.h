/* mountdir.h - mount directories: checks, creation, removal (mountdir.c). */
#ifndef MFS_MOUNTDIR_H
#define MFS_MOUNTDIR_H

#include "cli.h"
#include "fs.h"
#include "runtime.h"

/* The longest memory store id taken (the store's lock file records it). */
#define MOUNTDIR_ID_MAX 127

/* Refuses (0 or a negative errno, the reason printed on stderr) a session
 * whose mount paths are not clean and absolute (control characters
 * included), overlap, exist, or would hide the daemon's own cache
 * directory, runtime directory or log file; or whose store ids are longer
 * than MOUNTDIR_ID_MAX. */
int mountdir_check(const struct mount_opts *o);
/* mkdir -p of s->mount_path, recording the directories created in s and
 * in info (for the lock file), without going through a symbolic link
 * another account could change; opens the directory (s->dir_fd, s->dir_ref)
 * and its parent (s->parent_fd) and gives it to s->uid through them. */
int mountdir_make(struct fs_store *s, struct rt_lockinfo *info);
/* rmdir(path) of a directory mountdir_make created, through its parent
 * opened as a mount path is (no link another account could change is
 * gone through): a part of the path swapped for a link since cannot turn
 * root's rmdir onto an empty directory elsewhere.  0 or -1 with errno, as
 * rmdir. */
int mountdir_rmdir(const char *path);
/* Removes what mountdir_make created for s. */
void mountdir_remove(struct fs_store *s);
/* What is mounted at a path: its file system type (e.g. "fuse.memstorefs",
 * "tmpfs") and source (e.g. "memstorefs:ID"). */
struct mountdir_entry {
    char fstype[64], source[300];
};
/* The unique id of the mount path is on (the top one when path is a mount
 * point), which the kernel never gives another mount while the system
 * runs: 0, -ENOTSUP when the kernel does not tell it (before 6.8), or the
 * negative errno of statx (-EACCES: another account's FUSE mount, without
 * allow_other).  The mount's file system is not asked anything, so a dead
 * FUSE mount answers at once; the directories on the way to it are
 * looked up as by any path (no automount is triggered). */
int mountdir_mount_id(const char *path, uint64_t *id);
/* What is mounted at path now (the top mount): 1 with *m filled, 0 when
 * path is not a mount point, or a negative errno. */
int mountdir_mounted(const char *path, struct mountdir_entry *m);
/* Whether what mountdir_mounted found is store_id's own mount: type
 * fuse.memstorefs, source memstorefs:<id> (the fsname fsmount.c gives). */
bool mountdir_is_store(const char *fstype, const char *source, const char *store_id);
/* Whether m, what mountdir_mounted found at path, is the very mount lock
 * record rec describes: 1 when it is the store's and has the recorded
 * mount id (or the record has none: any mount of the store counts), 0
 * when it is something else (another file system, or a mount of the
 * store made there since by another daemon, another runtime directory's),
 * or a negative errno when it is the store's but its id cannot be read to
 * tell.  A record of an earlier boot (boot_id=) names no mount of this
 * one: 0.  The device number would not tell them apart: the kernel gives a
 * detached mount's number to the next mount. */
int mountdir_is_record(const char *path, const struct mountdir_entry *m,
                       const struct rt_lockinfo *rec);
/* Detaches (lazily) the mount at `at`, which the caller found to be a
 * store's dead mount: umount2 as root, else fusermount3 -u -z.  0 (also
 * when nothing is mounted there any more) or a negative errno (-EPERM
 * when fusermount3 refused or failed). */
int mountdir_detach(const char *at);
/* At exit: removes shared parents still waiting for their last store. */
void mountdir_finish(void);

#endif
