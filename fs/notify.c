/* notify.c - the one place that calls fuse_lowlevel_notify_*: the sync
 * engine reports what a remote change did to the cache, and this file
 * tells the kernel to drop exactly those cached names, attributes and
 * pages (and, before a sync decides or the session ends, to write the
 * dirty pages of the files open for writing: settle_pages); so does the
 * cache for the closes a failed commit left to its journal, once they
 * are back in the database (fs_notify_replayed, from its saver thread).
 * Called from those threads, never from inside a FUSE request and never
 * with a cache lock held, so the kernel's notification (which may wait
 * for a request in flight on the same directory) cannot deadlock.  One
 * exception, an inode's pages and attributes only (fs_notify_reverted):
 * a FLUSH, FSYNC or RELEASE whose cut edit was not saved, an OPEN that
 * ends an edit lost to the store or cut at the size limit (before its
 * answer), a SETATTR by path that does (after its answer: a truncate
 * holds the inode's writes off until then, and an invalidation may wait
 * for one), and a WRITE with O_APPEND the kernel placed at a stale size
 * (after its answer: the write holds its pages locked until then); the
 * kernel holds no lock there that an inode's invalidation takes (pages
 * and attributes; no directory, no i_rwsem), and the thread hands the
 * reading of requests to another first (fsloop_blocking), so a
 * read or write holding a page lock is answered.  ENOENT from the
 * kernel just means it had nothing cached. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "daemon.h"
#include "engine.h"
#include "fsloop.h"
#include "fs.h"
#include "log.h"
#include "openfile.h"
#include "warm.h"

static void report(const struct fs_store *s, const char *what, int rc)
{
    if (rc && rc != -ENOENT && rc != -ENOTCONN && rc != -EBADF)
        log_debug("kernel cache notification failed", "memory_store_id", s->id, "op", what,
                  "error", strerror(-rc));
}

/* Takes se_lock; false (lock released) when the store is not mounted.
 * teardown clears `mounted` under the same lock before unmounting, so a
 * notification never reaches a session being destroyed. */
static bool enter(struct fs_store *s)
{
    pthread_mutex_lock(&s->se_lock);
    if (s->se && s->mounted)
        return true;
    pthread_mutex_unlock(&s->se_lock);
    return false;
}

static void leave(struct fs_store *s)
{
    pthread_mutex_unlock(&s->se_lock);
}

static void inval_inode(void *arg, uint64_t row)
{
    struct fs_store *s = arg;
    warm_drop(row); /* its content changed: the next open looks again */
    ofile_forget_clean(row); /* before the kernel drops its pages: a read after refills them */
    if (!enter(s))
        return;
    report(s, "inval_inode",
           fuse_lowlevel_notify_inval_inode(s->se, fs_to_kernel(s, row), 0, 0));
    leave(s);
}

void fs_notify_reverted(struct fs_store *s, uint64_t row)
{
    /* The kernel's invalidation waits for the locks of the inode's pages,
     * which a read or write waiting for this daemon may hold: another
     * thread serves the mount first (and the sync thread, which holds
     * se_lock over its own notifications, is then served too). */
    fsloop_blocking();
    inval_inode(s, row);
}

static void entry_new(void *arg, uint64_t parent_row, const char *name)
{
    struct fs_store *s = arg;
    if (!enter(s))
        return;
    /* Drops a negative dentry the kernel may hold for the name, and the
     * directory's cached attributes and listing. */
    fuse_ino_t parent = fs_to_kernel(s, parent_row);
    report(s, "inval_entry",
           fuse_lowlevel_notify_inval_entry(s->se, parent, name, strlen(name)));
    report(s, "inval_inode", fuse_lowlevel_notify_inval_inode(s->se, parent, 0, 0));
    leave(s);
}

static void entry_gone(void *arg, uint64_t parent_row, uint64_t row, const char *name)
{
    struct fs_store *s = arg;
    warm_drop(row);
    if (!enter(s))
        return;
    fuse_ino_t parent = fs_to_kernel(s, parent_row);
    int rc = fuse_lowlevel_notify_delete(s->se, parent, fs_to_kernel(s, row), name,
                                         strlen(name));
    if (rc)
        rc = fuse_lowlevel_notify_inval_entry(s->se, parent, name, strlen(name));
    report(s, "delete", rc);
    report(s, "inval_inode", fuse_lowlevel_notify_inval_inode(s->se, parent, 0, 0));
    leave(s);
}

static void lost(void *arg, uint64_t row, const char *sha)
{
    (void)arg;
    ofile_lost(row, sha);
}

/* Whether row is a file of s (called with an open file's lock held: the
 * cache's comes after it). */
static bool of_store(void *arg, uint64_t row)
{
    const struct fs_store *s = arg;
    char id[CACHE_ID_MAX];
    return cache_store_of(s->cache, row, id) == 0 && strcmp(id, s->id) == 0;
}

static size_t writing(void *arg, uint64_t **rows)
{
    return ofile_writing_rows(of_store, arg, rows);
}

/* The kernel drops the inode's pages, writing the dirty ones first (a
 * WRITE each, into the open file as it is: its buffer is not forgotten
 * here, unlike inval_inode's), and its attributes. */
static void settle_pages(void *arg, uint64_t row)
{
    struct fs_store *s = arg;
    if (!enter(s))
        return;
    report(s, "settle_pages", fuse_lowlevel_notify_inval_inode(s->se, fs_to_kernel(s, row), 0, 0));
    leave(s);
}

void fs_notify_settle_open(struct fs_store *s)
{
    uint64_t *rows = NULL;
    size_t k = writing(s, &rows);
    for (size_t i = 0; i < k; i++)
        settle_pages(s, rows[i]);
    free(rows);
}

void fs_notify_replayed(void *arg, const uint64_t *rows, size_t n)
{
    const struct daemon *d = arg;
    for (size_t i = 0; i < n; i++) {
        char id[CACHE_ID_MAX];
        struct cnode node = {0};
        if (cache_store_of(d->cache, rows[i], id) != 0)
            continue;
        for (size_t k = 0; k < d->n; k++) {
            struct fs_store *s = &d->stores[k];
            if (strcmp(s->id, id) != 0)
                continue;
            /* Its content and attributes, then its name: a replay may
             * have made the file again where the rollback had removed it. */
            inval_inode(s, rows[i]);
            if (cache_getattr(d->cache, rows[i], &node) == 0 && node.parent && !node.unlinked)
                entry_new(s, node.parent, node.name);
            cnode_clear(&node);
            break;
        }
    }
}

void fs_notify_init(struct fs_store *s, struct sync_notify *n)
{
    memset(n, 0, sizeof(*n));
    n->arg = s;
    n->inval_inode = inval_inode;
    n->entry_new = entry_new;
    n->entry_gone = entry_gone;
    n->lost = lost;
    n->writing = writing;
    n->settle_pages = settle_pages;
}
