/* mnt.h - support for real-mount tests: a private temp dir (mount points,
 * cache, runtime dir), a private memstored, running memstorefs and shell
 * commands with the right environment, and a teardown that unmounts and
 * stops everything it started (by PID), whether the test passed or not. */
#ifndef MFS_TEST_MNT_H
#define MFS_TEST_MNT_H

#include <stdbool.h>
#include <sys/types.h>

#include "msd.h"

struct mnt_env {
    struct msd msd;
    char root[256];   /* private temp dir */
    char mnt[300];    /* root/mnt: mount points go below */
    char cache[300];  /* root/cache: the default --cache-dir of mnt_mount */
    char run[300];    /* root/run: MEMSTOREFS_RUNTIME_DIR */
};

/* The memstorefs binary the tests run: $MEMSTOREFS_BIN, else the build's
 * (to run the tests against another build, e.g. an older one). */
const char *mnt_bin(void);

/* Starts memstored (extra args may be NULL) and makes the dirs.  0 or
 * -errno.  When /dev/fuse is missing the test fails (never skips). */
int mnt_setup(struct mnt_env *e, const char *const *msd_args);
/* Unmounts everything under root (memstorefs unmount --all, then SIGKILL
 * of any daemon still alive by the PID in its lock file, then a lazy
 * fusermount3 -u of any mount left), stops memstored, removes root (kept,
 * for a post-mortem, when MNT_KEEP is set; with MSD_KEEP=1 memstored's
 * directory is kept too). */
void mnt_teardown(struct mnt_env *e);

/* The first part of mnt_teardown: unmounts every store of e's runtime dir
 * (memstorefs unmount --all), then SIGKILLs any daemon still alive by the
 * PID in its lock file.  For a second daemon of a test: a copy of the env
 * with its own run and cache directories below the same root. */
void mnt_stop_daemons(const struct mnt_env *e);

/* Runs `sh -c CMD` (printf-formatted) with ANTHROPIC_API_KEY=test-key,
 * ANTHROPIC_BASE_URL=<memstored>, MEMSTOREFS_RUNTIME_DIR=<run>,
 * MFS=<memstorefs binary>, MNT=<mnt>, CACHE=<cache> in its environment
 * (the command may override them).  Returns the exit status (or -1) and,
 * when out is not NULL, the combined stdout+stderr (malloc'd). */
int mnt_sh(const struct mnt_env *e, char **out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* $MFS mount --store STORE:MNT/NAME[:ro] --cache-dir CACHE --sync-interval 5
 * plus extra (may be ""): the exit status, output in *out if not NULL. */
int mnt_mount(const struct mnt_env *e, const char *store, const char *name, bool ro,
              const char *extra, char **out);

/* Makes memstored answer every memory write (POST and DELETE below
 * /v1/memory_stores/ * /memories) with 409 conflict_error until the test
 * ends, so that a test of local state sees it before any push. */
void mnt_hold_writes(const struct mnt_env *e);

/* Polls `sh -c CMD` until it exits 0 or timeout_s passes; true if it did. */
bool mnt_wait_sh(const struct mnt_env *e, int timeout_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* First column of the first row of a query (printf-formatted) on the
 * cache database CACHE/cache.db, opened read-only beside the daemon; ""
 * when there is no row (malloc'd). */
char *mnt_q(const struct mnt_env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The pid of a daemon of this test, from a store lock file in the private
 * runtime dir (0 when none). */
pid_t mnt_daemon_pid(const struct mnt_env *e);
/* Mounts store at MNT/name, then kills its daemon with SIGKILL and waits
 * (5 s at most) until it is gone: a dead mount.  Asserts each step. */
void mnt_mount_dead(const struct mnt_env *e, const char *store, const char *name);

/* True when path is a mount point now (from /proc/self/mountinfo). */
bool mnt_is_mounted(const char *path);
/* Whether the mount at path (asserted mounted) has the mount option opt
 * (a whole option, as /proc/self/mounts lists them). */
bool mnt_has_option(const char *path, const char *opt);
/* Reads a whole file (malloc'd, NUL-terminated) or NULL. */
char *mnt_read(const char *path, size_t *len);
/* Writes body as the whole file at path (created, truncated) with one
 * open, write and close: 0, or -errno of the first call that failed. */
int mnt_write(const char *path, const char *body);
/* Starts a child that opens each of paths[0..n) with flags (O_WRONLY and
 * O_CREAT | O_TRUNC, or O_APPEND; O_RDONLY with text NULL), writes text
 * to it (unless NULL) and holds them all open, unsaved (no close, no
 * fsync), until killed; returns its pid once it has written (asserts it
 * could).  A child that never forks: a
 * descriptor the test process held would be closed (a FLUSH, which saves)
 * by every shell the test starts.  The caller kills and reaps it. */
pid_t mnt_hold_open(const char *const *paths, size_t n, int flags, const char *text);

#endif
