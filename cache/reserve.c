/* reserve.c - the cache directory's reserve of disk space: the file
 * CACHE_DIR/reserve, blocks allocated to nothing (posix_fallocate, never
 * written), which a final sync gives back to the file system when the
 * disk is full (contract: cache.h, cache_reserve_keep and
 * cache_reserve_release).
 *
 * Why: the sync records in the cache what it is about to send and what
 * the store answered, and closes a failed commit left to the journal go
 * back into the database before anything else is written; on a full disk
 * both fail, so a session that ended on a full disk pushed nothing, and
 * where the cache does not outlive the sandbox its last edits were lost.
 * With the reserve, the last sync of a session (unmount, SIGTERM,
 * `memstorefs flush`) frees its blocks when it finds the cache out of
 * room, and runs with them.  User writes never use it while it exists:
 * it is given back only once the session ends.
 *
 * Invariants: one reserve per directory (daemons sharing a cache
 * directory share it; whichever ends first on a full disk frees it, the
 * next start with room makes it again); it is a private file (priv_open:
 * ours, regular, one link, never followed); a reserve that could not be
 * made whole is removed, never left half made, so that a start on a
 * nearly full disk takes nothing from it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "db_internal.h"
#include "log.h"
#include "private.h"

static void reserve_path(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s/reserve", dir);
}

static void fmt_mib(uint64_t bytes, char *out, size_t len)
{
    snprintf(out, len, "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
}

uint64_t db_reserve_bytes(const struct cache *c)
{
    char path[4200];
    reserve_path(c->dir, path, sizeof(path));
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    return (uint64_t)st.st_blocks * 512;
}

int cache_reserve_keep(struct cache *c, uint64_t bytes)
{
    char path[4200], why[600] = "";
    reserve_path(c->dir, path, sizeof(path));
    if (!bytes) {
        int rc = priv_unlink(path, S_IFREG); /* --cache-reserve 0: none kept */
        return rc == -ENOENT ? 0 : rc;
    }
    int fd = priv_open(path, O_RDWR | O_CREAT, why, sizeof(why));
    if (fd < 0) {
        log_warn("cannot keep the cache's reserve of disk space; a session that ends on a full "
                 "disk may push nothing", "file", path, "error", why[0] ? why : strerror(-fd));
        return fd;
    }
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : -errno;
    /* Whole already (a daemon before this one made it), or made whole now;
     * a larger one from a larger --cache-reserve is cut down. */
    if (!rc && (uint64_t)st.st_size > bytes && ftruncate(fd, (off_t)bytes) != 0)
        rc = -errno;
    if (!rc && ((uint64_t)st.st_size < bytes || (uint64_t)st.st_blocks * 512 < bytes))
        rc = -posix_fallocate(fd, 0, (off_t)bytes);
    close(fd);
    if (!rc)
        return 0;
    /* Half made: what it took is given back rather than kept from a disk
     * that has little room left. */
    (void)priv_unlink(path, S_IFREG);
    char size[32];
    fmt_mib(bytes, size, sizeof(size));
    log_warn("no room for the cache's reserve of disk space; a session that ends on a full disk "
             "may push nothing", "file", path, "size", size, "error", strerror(-rc));
    return rc;
}

int cache_reserve_free(const char *dir, uint64_t *freed)
{
    char path[4200];
    reserve_path(dir, path, sizeof(path));
    *freed = 0;
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    int rc = priv_unlink(path, S_IFREG);
    if (rc == -ENOENT)
        return 0; /* another daemon sharing the directory freed it first */
    if (rc) {
        log_warn("cannot free the cache's reserve of disk space", "file", path, "error",
                 rc == -EPERM ? "not a regular file of this user; left as it is"
                              : strerror(-rc));
        return rc;
    }
    *freed = (uint64_t)st.st_blocks * 512;
    char size[32];
    fmt_mib(*freed, size, sizeof(size));
    log_warn("the cache's disk is full: its reserve of disk space is freed for the last sync",
             "file", path, "size", size);
    return 0;
}

int cache_reserve_release(struct cache *c, uint64_t *freed)
{
    int rc = cache_reserve_free(c->dir, freed);
    /* The closes a failed commit left to the journal go back in now,
     * before the sync reads what is dirty. */
    if (!rc && *freed)
        (void)cache_settle(c); /* a failure is logged; the sync tries again (db_begin) */
    return rc;
}

bool cache_lacks_room(struct cache *c)
{
    if (__atomic_load_n(&c->no_room, __ATOMIC_ACQUIRE))
        return true;
    /* A disk another process filled after the cache's last write: nothing
     * failed yet, and a commit may still fit in blocks the write-ahead log
     * has, but the sync's records would not. */
    struct statvfs sv;
    return statvfs(c->dir, &sv) == 0 &&
           (uint64_t)sv.f_bavail * sv.f_frsize < CACHE_ROOM_LOW;
}
